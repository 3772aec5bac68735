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


#: The listener and security keys: (Kafka name, attribute, parser, default text, required).
LISTENER_KEYS: dict[str, ConfigKey] = key_table(
    ("listeners", "listeners", listeners_value, "tcp:9092"),
    ("advertised.listeners", "advertised_listeners", optional_text, None),
    # Named listeners and TLS (broker_core/config/listeners.py checks them together).
    ("listener.security.protocol.map", "listener_security_protocol_map", optional_text, None),
    ("inter.broker.listener.name", "inter_broker_listener_name", optional_text, None),
    ("ssl.certfile", "ssl_certfile", optional_text, None),
    ("ssl.keyfile", "ssl_keyfile", optional_text, None),
    ("ssl.cafile", "ssl_cafile", optional_text, None),
    ("ssl.client.auth", "ssl_client_auth", client_auth, "none"),
    # SASL: the cluster login's secret and the mechanisms SASL listeners offer clients.
    ("cluster.secret.file", "cluster_secret_file", optional_text, None),
    ("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", sasl_mechanisms,
     "SCRAM-SHA-256,SCRAM-SHA-512"),
    ("metrics.listener", "metrics_listener", optional_endpoint, None),
    # /metrics protection: HTTP basic auth users (``sluice metrics-password`` lines).
    ("metrics.basic.auth.file", "metrics_basic_auth_file", optional_text, None),
    # ACLs (broker_core.security.acl): off by default, as Kafka without an authorizer.
    ("authorizer.enabled", "authorizer_enabled", boolean, "false"),
    ("super.users", "super_users", principal_list, ""),
    ("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", boolean, "false"),
    ("socket.request.max.bytes", "socket_request_max_bytes", integer(1, INT_MAX), "104857600"),
    # Connection and request-memory limits of every listener (docs/configuration.md, "Limits").
    ("queued.max.request.bytes", "queued_max_request_bytes",
     integer(-1, what="an integer ≥ 1, or -1 (unbounded)"), "268435456"),
    ("connections.max.idle.ms", "connections_max_idle_ms",
     integer(-1, what="an integer ≥ 1, or -1 (never)"), "600000"),
    ("max.connections", "max_connections", integer(0, INT_MAX), "10000"),
    ("max.connections.per.ip", "max_connections_per_ip", integer(0, INT_MAX), "1000"),
    ("max.connections.per.ip.overrides", "max_connections_per_ip_overrides",
     per_ip_overrides, ""),
    # Bounds on reservations made at a frame's size prefix (broker_core.server.memory_pool).
    ("socket.request.read.timeout.ms", "socket_request_read_timeout_ms",
     integer(-1, what="an integer ≥ 1, or -1 (never)"), "30000"),
    ("queued.max.request.bytes.per.ip", "queued_max_request_bytes_per_ip",
     integer(-1, what="an integer ≥ 1, or -1 (no per-address cap)"), "134217728"),
)
