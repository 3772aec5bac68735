"""The keys of the broker's listeners and their security: the listeners and TLS, SASL and the
cluster secret, ACLs, the ``/metrics`` listener, and every listener's connection and
request-memory limits (:func:`check_limits` checks the limits' agreement)."""

from __future__ import annotations

from typing import Any

from broker_core.config.listeners import is_kafka_form, parse_named_list
from broker_core.config.parsing import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    bad_value,
    boolean,
    endpoint,
    integer,
    key_table,
    optional_endpoint,
    optional_text,
    typed,
)
from broker_core.security.acl import parse_super_users
from broker_core.security.principal import canonical_host
from broker_core.wire.messages.describe_configs import ConfigType


def principal_list(key: str, raw: str) -> frozenset[str]:
    """``User:a;User:b`` (Kafka's ``super.users``) → the principals' texts; empty: none."""
    try:
        return parse_super_users(raw)
    except ValueError:
        raise bad_value(key, raw, "principals separated by ';', e.g. User:admin;User:ops") from None


def sasl_mechanisms(key: str, raw: str) -> str:
    """A comma-separated list of SASL mechanisms Sluice implements, each once; normalised to
    ``A,B`` (read it as a tuple with
    :meth:`~broker_core.config.broker_config.BrokerConfig.sasl_mechanisms`)."""
    from broker_core.security.sasl import KNOWN_MECHANISMS  # noqa: PLC0415

    names = [n.strip() for n in raw.split(",")]
    expected = f"a list of {', '.join(KNOWN_MECHANISMS)}"
    if not names or any(not n for n in names):
        raise bad_value(key, raw, expected)
    for n in names:
        if n not in KNOWN_MECHANISMS:
            raise ConfigError(f"unknown SASL mechanism {n!r} in {key!r} (known: "
                              f"{', '.join(KNOWN_MECHANISMS)})", key)
    if len(set(names)) != len(names):
        raise bad_value(key, raw, f"{expected}, each at most once")
    return ",".join(names)


def listeners_value(key: str, raw: str) -> str:
    """``listeners``: Kafka's ``NAME://host:port[,...]`` (checked here; the listener model,
    with the keys it depends on, is checked by ``BrokerConfig.from_mapping``) or one Twisted
    server endpoint (:func:`endpoint`, one PLAINTEXT listener)."""
    value = raw.strip()
    if value and is_kafka_form(value):
        parse_named_list(key, raw, port_zero=True)
        return value
    return endpoint(key, raw)


def client_auth(key: str, raw: str) -> str:
    """``ssl.client.auth``: none, requested or required."""
    value = raw.strip().lower()
    if value not in ("none", "requested", "required"):
        raise bad_value(key, raw, "none, requested or required")
    return value


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:n,host:n`` (Kafka's form; an IPv6 address
    is everything before the last colon). Raises ValueError naming the bad entry. Hosts are
    normalised as addresses where they are addresses (:func:`canonical_host`), so ``::1`` and
    ``0::1`` are one host."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{entry!r} is not host:count")
        out[canonical_host(host)] = int(count)
    return out


def per_ip_overrides(key: str, raw: str) -> str:
    """``host:n,host:n`` (``max.connections.per.ip.overrides``), checked and kept as text
    (:func:`parse_overrides` reads it); empty: none."""
    try:
        parse_overrides(raw)
    except ValueError as e:
        raise bad_value(key, raw, f"host:count,... ({e})") from None
    return raw.strip()


def check_limits(attrs: dict[str, Any]) -> None:
    """0 is no value for the keys where -1 means "no limit"; the memory pool must hold the
    largest frame, or a frame that size would wait forever (Kafka makes the same check)."""
    for key, attr in (("queued.max.request.bytes", "queued_max_request_bytes"),
                      ("connections.max.idle.ms", "connections_max_idle_ms"),
                      ("socket.request.read.timeout.ms", "socket_request_read_timeout_ms"),
                      ("queued.max.request.bytes.per.ip", "queued_max_request_bytes_per_ip")):
        if attrs[attr] == 0:
            raise ConfigError(f"{key} must be at least 1, or -1", key)
    frame = attrs["socket_request_max_bytes"]
    for key, attr in (("queued.max.request.bytes", "queued_max_request_bytes"),
                      ("queued.max.request.bytes.per.ip", "queued_max_request_bytes_per_ip")):
        if 0 < attrs[attr] < frame:
            raise ConfigError(f"{key} ({attrs[attr]}) must be -1 or at least "
                              f"socket.request.max.bytes ({frame})", key)


# Kafka declares these as lists (DescribeConfigs reports their type so).
for _parser in (principal_list, sasl_mechanisms, listeners_value, per_ip_overrides):
    typed(_parser, ConfigType.LIST)


#: The listener and security keys: (Kafka name, attribute, parser, default text, doc, required).
LISTENER_KEYS: dict[str, ConfigKey] = key_table(
    ("listeners", "listeners", listeners_value, "tcp:9092",
     "Where the broker listens: NAME://host:port,... (names unique, no two on one port) or one "
     "Twisted server endpoint."),
    ("advertised.listeners", "advertised_listeners", optional_text, None,
     "Where clients reach each listener, published in the registration and Metadata: "
     "NAME://host:port,... or host:port for the first (unset: the bound address)."),
    # Named listeners and TLS (broker_core/config/listeners.py checks them together).
    ("listener.security.protocol.map", "listener_security_protocol_map", optional_text, None,
     "NAME:PROTOCOL,...: each listener's security protocol, PLAINTEXT, SSL, SASL_PLAINTEXT or "
     "SASL_SSL (unset: each protocol's name maps to itself)."),
    ("inter.broker.listener.name", "inter_broker_listener_name", optional_text, None,
     "The listener other brokers connect to (unset: the first listener); a TLS one makes "
     "brokers verify each other's certificates."),
    ("ssl.certfile", "ssl_certfile", optional_text, None,
     "PEM file with a TLS listener's certificate and any intermediates; required for every SSL "
     "and SASL_SSL listener."),
    ("ssl.keyfile", "ssl_keyfile", optional_text, None,
     "PEM file with the unencrypted private key of ssl.certfile's certificate; required with "
     "it."),
    ("ssl.cafile", "ssl_cafile", optional_text, None,
     "PEM file with the CA certificates client certificates are checked against; required when "
     "ssl.client.auth is not none and on TLS inter-broker and quorum listeners."),
    ("ssl.client.auth", "ssl_client_auth", client_auth, "none",
     "Whether a TLS listener asks clients for a certificate: none, requested or required."),
    # SASL: the cluster login's secret and the mechanisms SASL listeners offer clients.
    ("cluster.secret.file", "cluster_secret_file", optional_text, None,
     "A private file holding the cluster secret the brokers log in to each other with; "
     "required, the same on every broker."),
    ("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", sasl_mechanisms,
     "SCRAM-SHA-256,SCRAM-SHA-512",
     "The SASL mechanisms a SASL listener offers clients, from PLAIN, SCRAM-SHA-256 and "
     "SCRAM-SHA-512, each once."),
    ("metrics.listener", "metrics_listener", optional_endpoint, None,
     "Twisted endpoint serving the Prometheus /metrics page (unset: none)."),
    # /metrics protection: HTTP basic auth users (``sluice metrics-password`` lines).
    ("metrics.basic.auth.file", "metrics_basic_auth_file", optional_text, None,
     "A private file of user:hash lines; with it /metrics asks for HTTP basic auth with one of "
     "these users."),
    # ACLs (broker_core.security.acl): off by default, as Kafka without an authorizer.
    ("authorizer.enabled", "authorizer_enabled", boolean, "false",
     "Whether every request is checked against the ACLs; when false every client may use every "
     "client API."),
    ("super.users", "super_users", principal_list, "",
     "Principals allowed everything whatever the ACLs say, separated by ';' "
     "(User:admin;User:ops)."),
    ("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", boolean, "false",
     "With the authorizer on, whether every principal is allowed on a resource no ACL covers at "
     "all."),
    ("socket.request.max.bytes", "socket_request_max_bytes", integer(1, INT_MAX), "104857600",
     "The largest request frame in bytes; a larger one closes the connection as soon as its "
     "size has arrived (≥ 1)."),
    # Connection and request-memory limits of every listener (docs/configuration.md, "Limits").
    ("queued.max.request.bytes", "queued_max_request_bytes",
     integer(-1, what="an integer ≥ 1, or -1 (unbounded)"), "268435456",
     "The memory pool in bytes for request bytes a frame's size reserves before it is buffered "
     "(-1: unbounded; else at least socket.request.max.bytes)."),
    ("connections.max.idle.ms", "connections_max_idle_ms",
     integer(-1, what="an integer ≥ 1, or -1 (never)"), "600000",
     "A connection with nothing in flight, received or sent for this many milliseconds is "
     "closed (-1: never)."),
    ("max.connections", "max_connections", integer(0, INT_MAX), "10000",
     "Connections the broker's Kafka listeners accept together; one more is closed at accept "
     "(≥ 0)."),
    ("max.connections.per.ip", "max_connections_per_ip", integer(0, INT_MAX), "1000",
     "Connections accepted from one address across the Kafka listeners; one more is closed at "
     "accept (≥ 0)."),
    ("max.connections.per.ip.overrides", "max_connections_per_ip_overrides",
     per_ip_overrides, "",
     "Per-address exceptions to max.connections.per.ip as host:count,host:count (empty: none)."),
    # Bounds on reservations made at a frame's size prefix (broker_core.server.memory_pool).
    ("socket.request.read.timeout.ms", "socket_request_read_timeout_ms",
     integer(-1, what="an integer ≥ 1, or -1 (never)"), "30000",
     "Milliseconds a request may take to arrive whole once its size has arrived, or the "
     "connection is closed (-1: never)."),
    ("queued.max.request.bytes.per.ip", "queued_max_request_bytes_per_ip",
     integer(-1, what="an integer ≥ 1, or -1 (no per-address cap)"), "134217728",
     "The most request bytes one address may hold reserved in the pool at once (-1: no cap; "
     "else at least socket.request.max.bytes)."),
)
