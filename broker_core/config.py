"""Typed broker configuration with Kafka's key names, and the per-topic keys Sluice accepts.

Sources, lowest precedence first: the defaults below, a Java-properties file (``--config``),
then ``--set key=value`` pairs (``twistd broker``'s own options are turned into ``--set`` pairs
by ``broker_core.tap``). Every value is parsed and checked once, at start; a bad one stops the
broker with a :class:`ConfigError` naming the key. ``docs/configuration.md`` lists every key.

The machinery (:class:`ConfigKey`, :func:`parse_keys`, :func:`read_properties`) is shared:
another component declares its own keys and frozen dataclass the same way.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker_core.security.acl import parse_super_users
from broker_core.wire.messages.describe_configs import ConfigType

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class ConfigError(ValueError):
    """A configuration problem; the message names the key (``key`` holds it when there is one)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# -- value parsers: (key, raw text) -> typed value, or ConfigError -------------------------------

Parser = Callable[[str, str], Any]
_DECIMAL = re.compile(r"[0-9]+")
_SIGNED_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_decimal(text: str, *, signed: bool = False) -> int | None:
    """The integer ``text`` spells in plain ASCII decimal digits (a leading ``+``/``-`` only
    when ``signed``), else None. Use it instead of ``str.isdigit()`` + ``int()``: ``isdigit``
    is true for ``"²"``, on which ``int`` raises, and ``int`` also takes ``"1_000"`` and
    non-ASCII digits. No whitespace is stripped."""
    pattern = _SIGNED_DECIMAL if signed else _DECIMAL
    return int(text) if pattern.fullmatch(text) else None


def _bad(key: str, raw: str, expected: str) -> ConfigError:
    return ConfigError(f"invalid value {raw!r} for {key!r}: expected {expected}", key)


def config_type_of(parse: Parser) -> ConfigType:
    """The Kafka type a parser's values have (DescribeConfigs v3+ ``config_type``); a parser
    says so in its ``config_type`` attribute, text is the rest."""
    return getattr(parse, "config_type", ConfigType.STRING)


def _typed(parse: Parser, config_type: ConfigType) -> Parser:
    parse.config_type = config_type  # type: ignore[attr-defined]
    return parse


def integer(lo: int, hi: int = LONG_MAX, *, what: str | None = None) -> Parser:
    """An integer in ``[lo, hi]`` (Kafka's ``atLeast``; ``hi`` is the Java type's maximum)."""
    expected = what or f"an integer ≥ {lo}"

    def parse(key: str, raw: str) -> int:
        value = parse_decimal(raw.strip(), signed=True)
        if value is None or value < lo:
            raise _bad(key, raw, expected)
        if value > hi:
            raise _bad(key, raw, f"an integer ≤ {hi}")
        return value
    return _typed(parse, ConfigType.INT if hi <= INT_MAX else ConfigType.LONG)


def long_or_none(lo: int) -> Parser:
    """A Java long where Kafka's default ``Long.MAX_VALUE`` means "never": that value (and
    anything above 2**62, which no interval reaches) becomes None."""
    parse_int = integer(lo, LONG_MAX, what=f"an integer ≥ {lo} (or {LONG_MAX} for never)")

    def parse(key: str, raw: str) -> int | None:
        value = parse_int(key, raw)
        return None if value >= (1 << 62) else value
    return _typed(parse, ConfigType.LONG)


def boolean(key: str, raw: str) -> bool:
    """``true`` or ``false``, any case (as Kafka's ``ConfigDef``)."""
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _bad(key, raw, "true or false")


boolean.config_type = ConfigType.BOOLEAN  # type: ignore[attr-defined]


def text(key: str, raw: str) -> str:
    """Any non-empty text."""
    value = raw.strip()
    if not value:
        raise _bad(key, raw, "a non-empty value")
    return value


def optional_text(key: str, raw: str) -> str | None:
    """Text, or None when empty."""
    return raw.strip() or None


def principal_list(key: str, raw: str) -> frozenset[str]:
    """``User:a;User:b`` (Kafka's ``super.users``) → the principals' texts; empty: none."""
    try:
        return parse_super_users(raw)
    except ValueError:
        raise _bad(key, raw, "principals separated by ';', e.g. User:admin;User:ops") from None
def sasl_mechanisms(key: str, raw: str) -> str:
    """A comma-separated list of SASL mechanisms Sluice implements, each once; normalised to
    ``A,B`` (read it as a tuple with :meth:`BrokerConfig.sasl_mechanisms`)."""
    from broker_core.security.sasl import KNOWN_MECHANISMS  # noqa: PLC0415

    names = [n.strip() for n in raw.split(",")]
    expected = f"a list of {', '.join(KNOWN_MECHANISMS)}"
    if not names or any(not n for n in names):
        raise _bad(key, raw, expected)
    for n in names:
        if n not in KNOWN_MECHANISMS:
            raise ConfigError(f"unknown SASL mechanism {n!r} in {key!r} (known: "
                              f"{', '.join(KNOWN_MECHANISMS)})", key)
    if len(set(names)) != len(names):
        raise _bad(key, raw, f"{expected}, each at most once")
    return ",".join(names)


def _port(key: str, raw: str, port: str) -> int:
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise _bad(key, raw, "a port number from 0 to 65535")
    return int(port)


def endpoint(key: str, raw: str) -> str:
    """A Twisted server endpoint string (``tcp:9092:interface=127.0.0.1``).

    Kafka's listener form ``PLAINTEXT://host:port`` is accepted and translated (an empty host
    means every interface). Only one listener is supported; for ``tcp``/``tcp6`` the port is
    checked here, anything else is checked by Twisted when the broker binds.
    """
    value = raw.strip()
    if not value:
        raise _bad(key, raw, "a Twisted server endpoint such as 'tcp:9092'")
    if "," in value and "://" in value:
        raise _bad(key, raw, "a single listener (Sluice serves one plaintext listener)")
    if "://" in value:
        scheme, _, hostport = value.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise _bad(key, raw, "a PLAINTEXT:// listener (TLS and SASL are not supported)")
        host, sep, port = hostport.rpartition(":")
        if not sep:
            raise _bad(key, raw, "PLAINTEXT://host:port")
        number = _port(key, raw, port)
        host = host.strip("[]")
        return f"tcp:{number}:interface={host}" if host else f"tcp:{number}"
    kind, sep, rest = value.partition(":")
    if not sep or not kind.isidentifier():
        raise _bad(key, raw, "a Twisted server endpoint such as 'tcp:9092'")
    if kind in ("tcp", "tcp6"):
        first = rest.split(":", 1)[0]
        port = first.partition("=")[2] if first.startswith("port=") else first
        _port(key, raw, port)
    return value


def listeners_value(key: str, raw: str) -> str:
    """``listeners``: Kafka's ``NAME://host:port[,...]`` (checked here; the listener model,
    with the keys it depends on, is checked by ``BrokerConfig.from_mapping``) or one Twisted
    server endpoint (:func:`endpoint`, one PLAINTEXT listener)."""
    from broker_core.server.listeners import is_kafka_form, parse_named_list  # noqa: PLC0415

    value = raw.strip()
    if value and is_kafka_form(value):
        parse_named_list(key, raw, port_zero=True)
        return value
    return endpoint(key, raw)


def client_auth(key: str, raw: str) -> str:
    """``ssl.client.auth``: none, requested or required."""
    value = raw.strip().lower()
    if value not in ("none", "requested", "required"):
        raise _bad(key, raw, "none, requested or required")
    return value


def optional_endpoint(key: str, raw: str) -> str | None:
    """An :func:`endpoint`, or None when empty."""
    return endpoint(key, raw) if raw.strip() else None


def host_port(key: str, raw: str) -> str | None:
    """``host:port`` (``PLAINTEXT://host:port`` also accepted), or None when empty."""
    value = raw.strip()
    if not value:
        return None
    if "," in value:
        raise _bad(key, raw, "a single host:port")
    if "://" in value:
        scheme, _, value = value.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise _bad(key, raw, "host:port or PLAINTEXT://host:port")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _bad(key, raw, "host:port with a port from 1 to 65535")
    return f"{host}:{int(port)}"


def per_ip_overrides(key: str, raw: str) -> str:
    """``host:n,host:n`` (``max.connections.per.ip.overrides``), checked and kept as text
    (:func:`~broker_core.server.connection_limits.parse_overrides` reads it); empty: none."""
    from broker_core.server.connection_limits import parse_overrides  # noqa: PLC0415

    try:
        parse_overrides(raw)
    except ValueError as e:
        raise _bad(key, raw, f"host:count,... ({e})") from None
    return raw.strip()


def zookeeper_connect(key: str, raw: str) -> str:
    """``host:port[,host:port...][/chroot]``; a missing port means 2181 (kazoo's default)."""
    value = raw.strip()
    expected = "host:port[,host:port...][/chroot]"
    if not value or any(c.isspace() for c in value):
        raise _bad(key, raw, expected)
    hosts, slash, chroot = value.partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise _bad(key, raw, expected + " with a chroot like /sluice")
    for server in hosts.split(","):
        host, sep, port = server.rpartition(":") if ":" in server else (server, "", "")
        if not host or (sep and (not port.isdigit() or not 1 <= int(port) <= 65535)):
            raise _bad(key, raw, expected)
    return value


def directories(key: str, raw: str) -> str:
    """``log.dirs``: one or more comma-separated directory paths (Kafka's JBOD, KIP-112), each
    named once; returned comma-joined without blanks (see :meth:`BrokerConfig.log_dir_paths`)."""
    value = raw.strip()
    if not value:
        raise _bad(key, raw, "a directory path, or several separated by commas")
    parts = [p.strip() for p in value.split(",")]
    if any(not p for p in parts):
        raise _bad(key, raw, "directory paths separated by commas, none of them empty")
    seen: dict[Path, str] = {}
    for p in parts:
        norm = Path(os.path.normpath(os.path.abspath(p)))
        if norm in seen:
            raise _bad(key, raw, f"each directory once ({seen[norm]!r} and {p!r} are the same)")
        for other, name in seen.items():
            if norm in other.parents or other in norm.parents:
                raise _bad(key, raw, f"directories that do not contain each other ({name!r} "
                                     f"and {p!r})")
        seen[norm] = p
    return ",".join(parts)


def zookeeper_auth_mechanism(key: str, raw: str) -> str:
    """``DIGEST-MD5`` (SASL) or ``digest`` (ZooKeeper's built-in scheme), any case."""
    from broker_core.zk.acl_policy import MECHANISMS, parse_mechanism  # noqa: PLC0415

    try:
        return parse_mechanism(raw)
    except ValueError:
        raise _bad(key, raw, " or ".join(MECHANISMS)) from None


def metadata_store(key: str, raw: str) -> str:
    """``zookeeper`` or ``quorum``."""
    value = raw.strip().lower()
    if value not in ("zookeeper", "quorum"):
        raise _bad(key, raw, "zookeeper or quorum")
    return value


#: The directory inside ``log.dirs`` that holds the metadata quorum's data by default.
QUORUM_DIR_NAME = "quorum"


def _check_limits(attrs: dict[str, Any]) -> None:
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


def _check_metadata_store(attrs: dict[str, Any]) -> None:
    """The keys one metadata store needs, and the quorum keys' agreement with each other."""
    if attrs["metadata_store"] == "zookeeper":
        if not attrs["zookeeper_connect"]:
            raise ConfigError("missing required config key 'zookeeper.connect'",
                              "zookeeper.connect")
        if attrs["zookeeper_set_acl"] and not attrs["zookeeper_auth_file"]:
            raise ConfigError("zookeeper.set.acl=true needs 'zookeeper.auth.file' (a private "
                              "file 'username:password'): the ACLs name that identity",
                              "zookeeper.auth.file")
        return
    from broker_core.raft.config import (  # noqa: PLC0415
        RaftConfigError,
        parse_bootstrap_servers,
        parse_quorum_voters,
    )

    if not attrs["quorum_voters"] and not attrs["quorum_bootstrap_servers"]:
        raise ConfigError("metadata.store=quorum needs 'quorum.voters' "
                          "(id@host:port,id@host:port,...) for the quorum's first start, or "
                          "'quorum.bootstrap.servers' (host:port,...) to find it",
                          "quorum.voters")
    voters = {}
    if attrs["quorum_voters"]:
        try:
            voters = parse_quorum_voters(attrs["quorum_voters"], "quorum.voters")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.voters") from None
    if attrs["quorum_bootstrap_servers"]:
        try:
            parse_bootstrap_servers(attrs["quorum_bootstrap_servers"], "quorum.bootstrap.servers")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.bootstrap.servers") from None
    own = voters.get(attrs["broker_id"])
    listener = attrs["quorum_listener"]
    if own is None and listener is None:
        raise ConfigError(f"broker {attrs['broker_id']} is not in quorum.voters, so it runs as "
                          "an observer and needs 'quorum.listener' (host:port)",
                          "quorum.listener")
    if own is not None and listener is not None:
        host, _, port = listener.rpartition(":")
        if int(port) != own.port:
            raise ConfigError(f"quorum.listener {listener} does not match this broker's "
                              f"entry {own} in quorum.voters (the voters reach it there)",
                              "quorum.listener")


# Kafka declares these as lists (DescribeConfigs reports their type so).
for _parser in (principal_list, sasl_mechanisms, listeners_value, directories,
                per_ip_overrides):
    _typed(_parser, ConfigType.LIST)


# -- key declarations ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigKey:
    """One configuration key: its Kafka name, the attribute that holds it, how to parse it, and
    its default as text (``None``: unset, the attribute is None unless ``required``)."""

    name: str
    attr: str
    parse: Parser
    default: str | None
    required: bool = False


def parse_keys(keys: Mapping[str, ConfigKey], values: Mapping[str, object],
               kind: str = "config") -> dict[str, Any]:
    """Check ``values`` (Kafka key -> text) against ``keys``; returns attribute -> typed value,
    defaults filled in. Raises ConfigError for an unknown key (with a suggestion), a missing
    required key, or a bad value. Non-text values (ints, bools) are accepted as their text."""
    for name in values:
        if name not in keys:
            raise ConfigError(unknown_key_message(name, keys, kind), name)
    raws = {name: _as_text(v) for name, v in values.items()}
    missing = [k.name for k in keys.values() if k.required and not raws.get(k.name, "").strip()]
    if len(missing) == 1:
        raise ConfigError(f"missing required {kind} key {missing[0]!r}", missing[0])
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise ConfigError(f"missing required {kind} keys {names}", missing[0])
    out: dict[str, Any] = {}
    for key in keys.values():
        raw = raws.get(key.name, key.default)
        out[key.attr] = None if raw is None else key.parse(key.name, raw)
    return out


def unknown_key_message(name: str, known: Iterable[str], kind: str = "config") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} key {name!r}{hint}"


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _keys(*entries: tuple[Any, ...]) -> dict[str, ConfigKey]:
    return {e[0]: ConfigKey(*e) for e in entries}


#: Every broker key: (Kafka name, attribute, parser, default text, required).
BROKER_KEYS: dict[str, ConfigKey] = _keys(
    ("broker.id", "broker_id", integer(0, INT_MAX), None, True),
    ("listeners", "listeners", listeners_value, "tcp:9092"),
    ("advertised.listeners", "advertised_listeners", optional_text, None),
    # Named listeners and TLS (broker_core/server/listeners.py checks them together).
    ("listener.security.protocol.map", "listener_security_protocol_map", optional_text, None),
    ("inter.broker.listener.name", "inter_broker_listener_name", optional_text, None),
    ("ssl.certfile", "ssl_certfile", optional_text, None),
    ("ssl.keyfile", "ssl_keyfile", optional_text, None),
    ("ssl.cafile", "ssl_cafile", optional_text, None),
    ("ssl.client.auth", "ssl_client_auth", client_auth, "none"),
    ("metadata.store", "metadata_store", metadata_store, "zookeeper"),
    # Required in ZooKeeper mode only (checked in ``from_mapping``).
    ("zookeeper.connect", "zookeeper_connect", zookeeper_connect, None),
    ("zookeeper.session.timeout.ms", "zookeeper_session_timeout_ms", integer(1, INT_MAX),
     "18000"),
    ("zookeeper.connection.timeout.ms", "zookeeper_connection_timeout_ms", integer(1, INT_MAX),
     "18000"),
    # ZooKeeper ACLs (broker_core.zk.acl_policy): the brokers' credential, how they prove it,
    # and whether the nodes they create are writable by them only.
    ("zookeeper.set.acl", "zookeeper_set_acl", boolean, "false"),
    ("zookeeper.auth.file", "zookeeper_auth_file", optional_text, None),
    ("zookeeper.auth.mechanism", "zookeeper_auth_mechanism", zookeeper_auth_mechanism,
     "DIGEST-MD5"),
    ("log.dirs", "log_dirs", directories, None, True),
    ("quorum.voters", "quorum_voters", optional_text, None),
    ("quorum.bootstrap.servers", "quorum_bootstrap_servers", optional_text, None),
    ("quorum.listener", "quorum_listener", host_port, None),
    # The quorum listener's name: its protocol comes from listener.security.protocol.map and
    # its TLS files from listener.name.<name>.ssl.* (broker_core/server/listeners.py).
    ("quorum.listener.name", "quorum_listener_name", text, "QUORUM"),
    ("quorum.data.dir", "quorum_data_dir", optional_text, None),
    # The quorum node's timings and snapshots (RaftConfig's fields; defaults are its own).
    ("quorum.election.timeout.ms", "quorum_election_timeout_ms", integer(1, INT_MAX), "1000"),
    ("quorum.fetch.timeout.ms", "quorum_fetch_timeout_ms", integer(1, INT_MAX), "2000"),
    ("quorum.election.backoff.max.ms", "quorum_election_backoff_max_ms", integer(1, INT_MAX),
     "1000"),
    ("quorum.request.timeout.ms", "quorum_request_timeout_ms", integer(1, INT_MAX), "2000"),
    ("quorum.retry.backoff.ms", "quorum_retry_backoff_ms", integer(1, INT_MAX), "20"),
    ("quorum.snapshot.interval.entries", "quorum_snapshot_interval_entries",
     integer(0, INT_MAX, what="an integer ≥ 0 (0: no snapshot by entry count)"), "100000"),
    ("quorum.snapshot.interval.bytes", "quorum_snapshot_interval_bytes",
     integer(0, what="an integer ≥ 0 (0: no snapshot by size)"), "20971520"),
    ("quorum.snapshot.retain.entries", "quorum_snapshot_retain_entries",
     integer(-1, what="an integer ≥ -1 (-1: keep the whole log)"), "100000"),
    ("quorum.fetch.snapshot.max.bytes", "quorum_fetch_snapshot_max_bytes",
     integer(1, INT_MAX), "1048576"),
    ("cluster.id", "cluster_id", text, "sluice"),
    # SASL: the cluster login's secret and the mechanisms SASL listeners offer clients.
    ("cluster.secret.file", "cluster_secret_file", optional_text, None),
    ("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", sasl_mechanisms,
     "SCRAM-SHA-256,SCRAM-SHA-512"),
    ("metrics.listener", "metrics_listener", optional_endpoint, None),
    # /metrics protection: HTTP basic auth users (``sluice metrics-password`` lines).
    ("metrics.basic.auth.file", "metrics_basic_auth_file", optional_text, None),
    ("num.partitions", "num_partitions", integer(1, INT_MAX), "1"),
    ("default.replication.factor", "default_replication_factor", integer(1, 32767), "1"),
    ("auto.create.topics.enable", "auto_create_topics_enable", boolean, "true"),
    ("delete.topic.enable", "delete_topic_enable", boolean, "true"),
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
    ("message.max.bytes", "message_max_bytes", integer(0, INT_MAX), "1048588"),
    ("log.segment.bytes", "log_segment_bytes", integer(14, INT_MAX), "1073741824"),
    ("log.roll.ms", "log_roll_ms", integer(1), None),
    ("log.roll.hours", "log_roll_hours", integer(1, INT_MAX), "168"),
    ("log.retention.ms", "log_retention_ms", integer(-1, what="an integer ≥ -1 (-1: no limit)"),
     None),
    ("log.retention.minutes", "log_retention_minutes",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), None),
    ("log.retention.hours", "log_retention_hours",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), "168"),
    ("log.retention.bytes", "log_retention_bytes",
     integer(-1, what="an integer ≥ -1 (-1: no limit)"), "-1"),
    ("log.retention.check.interval.ms", "log_retention_check_interval_ms", integer(1), "300000"),
    ("log.flush.interval.messages", "log_flush_interval_messages", long_or_none(1), None),
    ("log.flush.interval.ms", "log_flush_interval_ms", long_or_none(0), None),
    ("log.flush.scheduler.interval.ms", "log_flush_scheduler_interval_ms", long_or_none(1),
     "1000"),
    ("log.index.interval.bytes", "log_index_interval_bytes", integer(0, INT_MAX), "4096"),
    # With CreateTime, how far a record's timestamp may lie before / after the leader's clock
    # (KIP-937; Kafka 4's defaults: the past unbounded, the future one hour).
    ("log.message.timestamp.before.max.ms", "log_message_timestamp_before_max_ms", integer(0),
     str(LONG_MAX)),
    ("log.message.timestamp.after.max.ms", "log_message_timestamp_after_max_ms", integer(0),
     "3600000"),
    # Rolled segments whose .log stays open at once (an LRU over the broker; docs/storage.md).
    ("log.open.segments.max", "log_open_segments_max", integer(1, INT_MAX), "1000"),
    # Idempotent producers a partition forgets after this long without a batch (Kafka's).
    ("producer.id.expiration.ms", "producer_id_expiration_ms", integer(1), "86400000"),
    ("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms",
     integer(1, INT_MAX), "600000"),
    ("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", integer(0, INT_MAX), "500"),
    ("replica.lag.time.max.ms", "replica_lag_time_max_ms", integer(1), "30000"),
    ("replica.fetch.min.bytes", "replica_fetch_min_bytes", integer(1, INT_MAX), "1"),
    ("replica.fetch.max.bytes", "replica_fetch_max_bytes", integer(0, INT_MAX), "1048576"),
    ("replica.fetch.response.max.bytes", "replica_fetch_response_max_bytes",
     integer(0, INT_MAX), "10485760"),
    ("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", integer(0, INT_MAX), "1000"),
    ("min.insync.replicas", "min_insync_replicas", integer(1, INT_MAX), "1"),
    ("unclean.leader.election.enable", "unclean_leader_election_enable", boolean, "false"),
    ("request.timeout.ms", "request_timeout_ms", integer(0, INT_MAX), "30000"),
    ("controller.socket.timeout.ms", "controller_socket_timeout_ms", integer(1, INT_MAX),
     "30000"),
    # Broker liveness as the controller sees it over the network (docs/replication.md,
    # "Fencing"): a heartbeat every interval; fenced after a session without one.
    ("broker.heartbeat.interval.ms", "broker_heartbeat_interval_ms", integer(1, INT_MAX),
     "2000"),
    ("broker.session.timeout.ms", "broker_session_timeout_ms", integer(1, INT_MAX), "9000"),
    ("fetch.purgatory.purge.interval.requests", "fetch_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000"),
    ("producer.purgatory.purge.interval.requests", "producer_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000"),
    ("broker.rack", "broker_rack", optional_text, None),
    ("controlled.shutdown.enable", "controlled_shutdown_enable", boolean, "true"),
    ("controlled.shutdown.max.retries", "controlled_shutdown_max_retries", integer(1, INT_MAX),
     "3"),
    ("controlled.shutdown.retry.backoff.ms", "controlled_shutdown_retry_backoff_ms",
     integer(0, INT_MAX), "5000"),
    # The consumer coordinator (docs/coordinator.md).
    ("group.min.session.timeout.ms", "group_min_session_timeout_ms", integer(1, INT_MAX),
     "6000"),
    ("group.max.session.timeout.ms", "group_max_session_timeout_ms", integer(1, INT_MAX),
     "1800000"),
    ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms",
     integer(0, INT_MAX), "3000"),
    ("group.max.size", "group_max_size", integer(1, INT_MAX), "1000"),
    ("rebalance.backoff.ms", "rebalance_backoff_ms", integer(0, INT_MAX), "2000"),
    ("rebalance.max.retries", "rebalance_max_retries", integer(1, INT_MAX), "4"),
    ("offsets.commit.interval.ms", "offsets_commit_interval_ms", integer(1, INT_MAX), "5000"),
    ("offset.metadata.max.bytes", "offset_metadata_max_bytes", integer(0, 65536), "4096"),
    ("coordinator.rebalance.handlers", "coordinator_rebalance_handlers", integer(1, 1024), "4"),
    ("coordinator.ping.max.failures", "coordinator_ping_max_failures", integer(0, INT_MAX), "1"),
    ("coordinator.empty.group.retention.ms", "coordinator_empty_group_retention_ms",
     integer(0, INT_MAX), "600000"),
)

REQUIRED = tuple(k.name for k in BROKER_KEYS.values() if k.required)


def required_keys(cfg: BrokerConfig) -> tuple[str, ...]:
    """The keys ``cfg``'s metadata store needs besides :data:`REQUIRED` included: with them
    alone (and the defaults) a broker of the same mode can be configured."""
    if cfg.metadata_store == "zookeeper":
        return (*REQUIRED, "zookeeper.connect")
    given = tuple(key for key, value in (("quorum.voters", cfg.quorum_voters),
                                         ("quorum.bootstrap.servers",
                                          cfg.quorum_bootstrap_servers),
                                         ("quorum.listener", cfg.quorum_listener))
                  if value is not None)
    return (*REQUIRED, "metadata.store", *given)


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's configuration: one typed, validated, immutable attribute per key.

    Attributes are the Kafka keys with dots as underscores; :meth:`get` takes the Kafka key.
    Invariant: every value has passed its key's check, and the two families with Kafka's
    precedence rules hold their effective value: ``log_roll_ms`` (``log.roll.ms``, else
    ``log.roll.hours``) and ``log_retention_ms`` (``log.retention.ms``, else ``.minutes``,
    else ``.hours``; any negative result is -1, no limit).
    """

    broker_id: int
    #: Kafka's ``NAME://host:port,...`` or a Twisted endpoint string (see
    #: :meth:`listener_configs`, the parsed model).
    listeners: str
    #: ``NAME://host:port,...`` or ``host:port`` (the first listener); None: each listener
    #: advertises its bound address.
    advertised_listeners: str | None
    #: ``NAME:PROTOCOL,...``; None: Kafka's default (each protocol's name maps to itself).
    listener_security_protocol_map: str | None
    #: None: the first listener.
    inter_broker_listener_name: str | None
    #: PEM files of TLS listeners (each overridable per listener; see listener_name_overrides).
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_cafile: str | None
    #: none, requested or required.
    ssl_client_auth: str
    #: Kafka's per-listener overrides ``listener.name.<name>.ssl.*``: (key, value) pairs, sorted.
    #: Not in BROKER_KEYS (the names are open-ended); checked by :meth:`listener_configs`.
    listener_name_overrides: tuple[tuple[str, str], ...]
    #: ``zookeeper`` (the default) or ``quorum`` (the self-managed metadata quorum).
    metadata_store: str
    #: None only in quorum mode.
    zookeeper_connect: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    #: Every znode the broker creates is writable by the brokers' credential only (Kafka's
    #: key); needs ``zookeeper_auth_file``.
    zookeeper_set_acl: bool
    #: A private file ``username:password``: the brokers' ZooKeeper credential.
    zookeeper_auth_file: str | None
    #: How the credential is proven: ``DIGEST-MD5`` (a SASL login, the default) or
    #: ``digest`` (ZooKeeper's built-in scheme, for servers without a JAAS file).
    zookeeper_auth_mechanism: str
    log_dirs: str
    #: Quorum mode: ``quorum.voters`` as given (checked by :meth:`quorum_voter_addresses`).
    quorum_voters: str | None
    #: Quorum mode: ``host:port,...`` of quorum listeners to find the quorum through
    #: (DiscoverBrokers); with it ``quorum.voters`` may be left out (checked at construction).
    quorum_bootstrap_servers: str | None
    #: Quorum mode: this broker's quorum listener ``host:port`` (default: its voter entry's).
    quorum_listener: str | None
    #: Quorum mode: the quorum listener's name (its protocol and TLS files: listener_configs).
    quorum_listener_name: str
    #: Quorum mode: the quorum-state file and the metadata log (default: see
    #: :meth:`quorum_data_path`).
    quorum_data_dir: str | None
    #: Quorum mode: the quorum node's settings (see :meth:`raft_config`).
    quorum_election_timeout_ms: int
    quorum_fetch_timeout_ms: int
    quorum_election_backoff_max_ms: int
    quorum_request_timeout_ms: int
    quorum_retry_backoff_ms: int
    quorum_snapshot_interval_entries: int
    quorum_snapshot_interval_bytes: int
    #: -1: keep the whole metadata log.
    quorum_snapshot_retain_entries: int
    quorum_fetch_snapshot_max_bytes: int
    cluster_id: str
    #: A file holding the cluster secret; every broker needs it (checked and read by
    #: :meth:`cluster_credential`, which refuses a broker without it).
    cluster_secret_file: str | None
    #: Normalised ``A,B`` text; :meth:`sasl_mechanisms` gives the tuple.
    sasl_enabled_mechanisms: str
    metrics_listener: str | None
    #: A private file of ``user:<hash>`` lines; with it /metrics asks for HTTP basic auth.
    metrics_basic_auth_file: str | None
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    authorizer_enabled: bool
    #: Principal texts (``User:admin``) allowed everything when the authorizer is on.
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    socket_request_max_bytes: int
    #: -1: unbounded. Else at least ``socket_request_max_bytes`` (checked at load).
    queued_max_request_bytes: int
    #: -1: never.
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    #: ``host:n,...``, each host's own per-IP limit (checked; read with ``parse_overrides``).
    max_connections_per_ip_overrides: str
    #: -1: never. How long a frame whose size has arrived may take to arrive whole.
    socket_request_read_timeout_ms: int
    #: -1: no cap. Else at least ``socket_request_max_bytes`` (checked at load).
    queued_max_request_bytes_per_ip: int
    message_max_bytes: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_hours: int
    log_retention_ms: int
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_messages: int | None
    log_flush_interval_ms: int | None
    log_flush_scheduler_interval_ms: int | None
    log_index_interval_bytes: int
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_open_segments_max: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    replica_fetch_wait_max_ms: int
    replica_lag_time_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    request_timeout_ms: int
    controller_socket_timeout_ms: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    fetch_purgatory_purge_interval_requests: int
    producer_purgatory_purge_interval_requests: int
    broker_rack: str | None
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_max_size: int
    rebalance_backoff_ms: int
    rebalance_max_retries: int
    offsets_commit_interval_ms: int
    offset_metadata_max_bytes: int
    coordinator_rebalance_handlers: int
    coordinator_ping_max_failures: int
    coordinator_empty_group_retention_ms: int

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> BrokerConfig:
        """Build from Kafka keys -> text (defaults fill the rest); raises ConfigError."""
        from broker_core.server.listeners import split_overrides  # noqa: PLC0415

        values, overrides = split_overrides(values)
        attrs = parse_keys(BROKER_KEYS, values)
        attrs["listener_name_overrides"] = tuple(sorted(
            (k, _as_text(v)) for k, v in overrides.items()))
        if attrs["log_roll_ms"] is None:
            attrs["log_roll_ms"] = attrs["log_roll_hours"] * HOUR_MS
        if attrs["log_retention_ms"] is None:
            minutes = attrs["log_retention_minutes"]
            attrs["log_retention_ms"] = (minutes * MINUTE_MS if minutes is not None
                                         else attrs["log_retention_hours"] * HOUR_MS)
        attrs["log_retention_ms"] = max(-1, attrs["log_retention_ms"])
        if attrs["group_min_session_timeout_ms"] > attrs["group_max_session_timeout_ms"]:
            raise ConfigError(
                f"group.min.session.timeout.ms ({attrs['group_min_session_timeout_ms']}) is "
                f"above group.max.session.timeout.ms ({attrs['group_max_session_timeout_ms']})",
                "group.min.session.timeout.ms")
        if attrs["broker_heartbeat_interval_ms"] >= attrs["broker_session_timeout_ms"]:
            # At least one heartbeat must fit in a session, or every broker is fenced at once.
            raise ConfigError(
                f"broker.heartbeat.interval.ms ({attrs['broker_heartbeat_interval_ms']}) must be "
                f"below broker.session.timeout.ms ({attrs['broker_session_timeout_ms']})",
                "broker.heartbeat.interval.ms")
        _check_limits(attrs)
        _check_metadata_store(attrs)
        cfg = cls(**attrs)
        cfg.listener_configs()  # the listener keys' agreement (ConfigError)
        if cfg.metadata_store == "quorum":
            cfg.raft_config()  # the quorum keys' agreement (ConfigError)
        else:
            cfg.zookeeper_acl_policy()  # zookeeper.auth.file readable and well-formed
        cfg.metrics_password_hashes()  # metrics.basic.auth.file likewise
        return cfg

    @classmethod
    def from_sources(cls, file: Path | None, overrides: Mapping[str, str]) -> BrokerConfig:
        """Defaults, then the properties ``file`` (if any), then ``overrides`` (``--set``)."""
        values: dict[str, object] = {}
        if file is not None:
            values.update(read_properties(Path(file)))
        values.update(overrides)
        return cls.from_mapping(values)

    # -- ZooKeeper ACLs ------------------------------------------------------------------------

    def zookeeper_acl_policy(self) -> Any:
        """The ZooKeeper store's ``AclPolicy``: the credential read from
        ``zookeeper.auth.file`` (checked: private, one ``username:password`` line), proven by
        ``zookeeper.auth.mechanism``, and ``zookeeper.set.acl``. Reads the file on each call;
        raises ConfigError naming the key."""
        from broker_core.zk.acl_policy import AclPolicy, ZkAuthFileError, ZkCredential  # noqa: PLC0415

        if self.zookeeper_auth_file is None:
            return AclPolicy()
        try:
            credential = ZkCredential.from_file(self.zookeeper_auth_file,
                                                mechanism=self.zookeeper_auth_mechanism)
        except ZkAuthFileError as e:
            raise ConfigError(str(e), "zookeeper.auth.file") from None
        return AclPolicy(credential, set_acl=self.zookeeper_set_acl)

    def metrics_password_hashes(self) -> Any:
        """The users of ``metrics.basic.auth.file`` (user -> ``PasswordHash``), or None when
        unset. Reads the file on each call; raises ConfigError naming the key."""
        from broker_core.security.basic_auth import PasswordFileError, load_password_file  # noqa: PLC0415

        if self.metrics_basic_auth_file is None:
            return None
        try:
            return load_password_file(self.metrics_basic_auth_file)
        except PasswordFileError as e:
            raise ConfigError(str(e), "metrics.basic.auth.file") from None
    # -- SASL --------------------------------------------------------------------------------

    def sasl_mechanisms(self) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` as a tuple, in the order given."""
        return tuple(self.sasl_enabled_mechanisms.split(","))

    def cluster_credential(self) -> Any:
        """The :class:`~broker_core.security.cluster_secret.ClusterCredential` read from
        ``cluster.secret.file``, which every broker must have (brokers authenticate each other
        with it, and the control plane is served to no one else). Reads the file on each call;
        raises ConfigError naming the key when it is unset (saying how to make one) or the
        file is missing, open to other users or too short."""
        from broker_core.security import cluster_secret  # noqa: PLC0415

        if self.cluster_secret_file is None:
            raise ConfigError(
                "missing required config key 'cluster.secret.file': every broker of a cluster "
                "needs the same private secret file to authenticate to the others; make one "
                "with `sluice secret create FILE` (then copy it to every broker, mode 0600) "
                "and set cluster.secret.file=FILE", "cluster.secret.file")
        try:
            return cluster_secret.ClusterCredential.from_file(self.cluster_secret_file)
        except cluster_secret.ClusterSecretError as e:
            raise ConfigError(str(e), "cluster.secret.file") from None

    # -- the metadata quorum -------------------------------------------------------------------

    def quorum_voter_addresses(self) -> dict[int, Any]:
        """``quorum.voters`` parsed: voter id -> ``VoterAddress`` (quorum mode only; empty
        when only ``quorum.bootstrap.servers`` is given)."""
        from broker_core.raft.config import RaftConfigError, parse_quorum_voters  # noqa: PLC0415

        if not self.quorum_voters:
            return {}
        try:
            return parse_quorum_voters(self.quorum_voters or "", "quorum.voters")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.voters") from None

    def quorum_bootstrap_server_list(self) -> list[tuple[str, int]]:
        """``quorum.bootstrap.servers`` parsed (empty when not given)."""
        from broker_core.raft.config import parse_bootstrap_servers  # noqa: PLC0415

        if not self.quorum_bootstrap_servers:
            return []
        return parse_bootstrap_servers(self.quorum_bootstrap_servers, "quorum.bootstrap.servers")

    def quorum_listen_address(self) -> tuple[str, int]:
        """Where this broker's quorum listener binds: ``quorum.listener``, else its own entry
        in ``quorum.voters`` (quorum mode only; checked at construction)."""
        if self.quorum_listener is not None:
            host, _, port = self.quorum_listener.rpartition(":")
            return host.strip("[]"), int(port)
        own = self.quorum_voter_addresses()[self.broker_id]
        return own.host, own.port

    def raft_config(self) -> Any:
        """The quorum node's :class:`~broker_core.raft.config.RaftConfig` from the
        ``quorum.*`` keys; ConfigError when they disagree (e.g. a request timeout not above
        the fetch wait)."""
        from broker_core.raft.config import RaftConfig, RaftConfigError  # noqa: PLC0415

        retain = self.quorum_snapshot_retain_entries
        try:
            return RaftConfig(
                election_timeout_ms=self.quorum_election_timeout_ms,
                fetch_timeout_ms=self.quorum_fetch_timeout_ms,
                election_backoff_max_ms=self.quorum_election_backoff_max_ms,
                request_timeout_ms=self.quorum_request_timeout_ms,
                retry_backoff_ms=self.quorum_retry_backoff_ms,
                snapshot_interval_entries=self.quorum_snapshot_interval_entries,
                snapshot_interval_bytes=self.quorum_snapshot_interval_bytes,
                snapshot_retain_entries=None if retain < 0 else retain,
                fetch_snapshot_max_bytes=self.quorum_fetch_snapshot_max_bytes)
        except RaftConfigError as e:
            # The message names the key (RaftConfig's checks use the quorum.* names).
            found = re.search(r"quorum\.[a-z.]+", str(e))
            raise ConfigError(str(e), found.group(0) if found else "quorum") from None

    def log_dir_paths(self) -> list[Path]:
        """The directories of ``log.dirs``, in the order given (the first also holds the
        metadata quorum's data by default)."""
        return [Path(p) for p in self.log_dirs.split(",")]

    def quorum_data_path(self) -> Path:
        """``quorum.data.dir``, else ``quorum`` inside the first directory of ``log.dirs`` (a
        name the log manager never takes for a partition: see
        ``broker_core.log.manager.RESERVED_DIRS``)."""
        return Path(self.quorum_data_dir) if self.quorum_data_dir else \
            self.log_dir_paths()[0] / QUORUM_DIR_NAME

    # -- access --------------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The value of a Kafka key (``cfg.get("num.partitions")``); ConfigError if unknown."""
        override = dict(self.listener_name_overrides).get(key)
        if override is not None:
            return override
        spec = BROKER_KEYS.get(key)
        if spec is None:
            raise ConfigError(unknown_key_message(key, BROKER_KEYS), key)
        return getattr(self, spec.attr)

    def as_properties(self) -> dict[str, str]:
        """Every key with its effective value as text (None as ""), e.g. for a startup log line
        or DescribeConfigs."""
        props = {name: _as_text(getattr(self, spec.attr)) for name, spec in BROKER_KEYS.items()}
        props.update(self.listener_name_overrides)
        return props

    @property
    def log_roll_effective_ms(self) -> int:
        """Same as ``log_roll_ms`` (kept for callers that used this name)."""
        return self.log_roll_ms

    def listener_configs(self) -> Any:
        """The listeners as a checked :class:`~broker_core.server.listeners.Listeners`
        (ConfigError naming the key if the listener keys disagree)."""
        from broker_core.server.listeners import parse_listeners  # noqa: PLC0415

        return parse_listeners(
            self.listeners, protocol_map=self.listener_security_protocol_map,
            inter_broker_listener_name=self.inter_broker_listener_name,
            advertised_listeners=self.advertised_listeners,
            ssl={"ssl.certfile": self.ssl_certfile, "ssl.keyfile": self.ssl_keyfile,
                 "ssl.cafile": self.ssl_cafile, "ssl.client.auth": self.ssl_client_auth},
            overrides=dict(self.listener_name_overrides),
            quorum=((self.quorum_listener_name, *self.quorum_listen_address())
                    if self.metadata_store == "quorum" else None))

    def advertised_address(self, bound_host: str, bound_port: int) -> tuple[str, int]:
        """The first listener's advertised ``(host, port)`` once bound to
        ``bound_host:bound_port`` (see ``ListenerConfig.advertised_address``)."""
        return self.listener_configs().listeners[0].advertised_address(bound_host, bound_port)


assert [f.name for f in fields(BrokerConfig) if f.name != "listener_name_overrides"] == \
    [k.attr for k in BROKER_KEYS.values()]


# -- the properties file ---------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java-properties style file (UTF-8); see :func:`parse_properties`."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} not found") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(path)!r}: {e.strerror}") from None
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 (byte {e.start})") from None
    return parse_properties(content, source=str(path))


def parse_properties(content: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java-properties text.

    ``key=value``, ``key: value`` or ``key value`` lines; ``#`` and ``!`` comments; blank lines;
    a trailing ``\\`` continues a line; backslash escapes (``\\t \\n \\r \\f \\uXXXX``, and
    ``\\=``, ``\\:``, ``\\ `` inside keys). A key given twice keeps the last value, as in Java.
    Raises ConfigError (with ``source:line``) for a line without a key or a bad ``\\u`` escape.
    """
    out: dict[str, str] = {}
    lines = content.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues the line.
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split(line)
        key = _unescape(key, source, number)
        if not key:
            raise ConfigError(f"{source}:{number}: expected key=value, got {line!r}")
        out[key] = _unescape(value, source, number)
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or whitespace; after it, whitespace and at
    # most one '=' or ':' separate it from the value.
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in " \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(s: str, source: str, number: int) -> str:
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source}:{number}: malformed \\u escape {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


# -- topic-level configuration ---------------------------------------------------------------------

def cleanup_policy(key: str, raw: str) -> str:
    """Only ``delete``: Sluice does not compact logs."""
    policies = [p.strip().lower() for p in raw.split(",") if p.strip()]
    if policies == ["delete"]:
        return "delete"
    if "compact" in policies:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: log compaction is not supported "
                          "(only 'delete')", key)
    raise _bad(key, raw, "'delete'")


def one_of(*choices: str, fold_case: bool = False) -> Parser:
    """One of ``choices``, spelled as listed (any case with ``fold_case``, normalised to the
    listed spelling)."""
    by_text = {(c.lower() if fold_case else c): c for c in choices}

    def parse(key: str, raw: str) -> str:
        text = raw.strip()
        found = by_text.get(text.lower() if fold_case else text)
        if found is None:
            raise _bad(key, raw, "one of " + ", ".join(choices))
        return found
    return parse


#: ``compression.type``: ``producer`` keeps the producer's codec; any other value makes the
#: leader store every batch with that codec (``uncompressed`` is Kafka's spelling of none).
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class TopicKey:
    """One per-topic config key, the single description every topic API uses (CreateTopics
    and the AlterConfigs APIs validate with ``parse``; DescribeConfigs reports ``config_type``,
    ``synonym`` and ``doc``; the broker builds each log's settings from the effective values).

    ``synonym`` is Kafka's broker-level key a topic without an override falls back to;
    ``builtin`` is the value when Sluice has no such broker key (``synonym`` not in
    :data:`BROKER_KEYS`): it then always has Kafka's default. ``doc`` says what the key does
    in Sluice (``docs/configuration.md`` repeats it); a key stored without effect says so."""

    name: str
    parse: Parser
    config_type: ConfigType
    synonym: str
    doc: str
    builtin: str | None = None


def _topic_keys(*keys: TopicKey) -> dict[str, TopicKey]:
    return {k.name: k for k in keys}


_NO_LIMIT = "an integer ≥ -1 (-1: no limit)"
_T = ConfigType

#: The per-topic keys Sluice accepts, in name order (DescribeConfigs reports them so).
TOPIC_CONFIG_KEYS: dict[str, TopicKey] = _topic_keys(
    TopicKey("cleanup.policy", cleanup_policy, _T.LIST, "log.cleanup.policy",
             "How old log segments are discarded: 'delete' removes them by retention.ms and "
             "retention.bytes (Sluice does not compact, so 'compact' is refused).", "delete"),
    TopicKey("compression.type", one_of(*COMPRESSION_TYPES), _T.STRING, "compression.type",
             "The codec the leader stores batches with: 'producer' keeps the producer's; "
             "'uncompressed', 'gzip', 'snappy', 'lz4' or 'zstd' makes the leader recompress "
             "every batch that arrives with another codec.", "producer"),
    TopicKey("delete.retention.ms", integer(0), _T.LONG, "log.cleaner.delete.retention.ms",
             "How long delete tombstones are kept by a compacted log. Stored and described; "
             "no effect in Sluice, which does not compact.", "86400000"),
    TopicKey("flush.messages", integer(1), _T.LONG, "log.flush.interval.messages",
             "Force an fsync after this many messages are appended "
             "(9223372036854775807: leave it to the operating system)."),
    TopicKey("flush.ms", integer(0), _T.LONG, "log.flush.interval.ms",
             "Force an fsync when the oldest unflushed message is this old "
             "(9223372036854775807: leave it to the operating system)."),
    TopicKey("index.interval.bytes", integer(0, INT_MAX), _T.INT, "log.index.interval.bytes",
             "Bytes of log between two offset index entries."),
    TopicKey("max.message.bytes", integer(0, INT_MAX), _T.INT, "message.max.bytes",
             "The largest record batch the leader accepts (after decompression as well)."),
    TopicKey("message.timestamp.after.max.ms", integer(0), _T.LONG,
             "log.message.timestamp.after.max.ms",
             "With CreateTime, the most a record's timestamp may lie after the leader's clock; "
             "a batch with a record further ahead is refused with INVALID_TIMESTAMP "
             "(9223372036854775807: no bound)."),
    TopicKey("message.timestamp.before.max.ms", integer(0), _T.LONG,
             "log.message.timestamp.before.max.ms",
             "With CreateTime, the most a record's timestamp may lie before the leader's clock; "
             "a batch with a record further back is refused with INVALID_TIMESTAMP "
             "(9223372036854775807: no bound)."),
    TopicKey("message.timestamp.difference.max.ms", integer(0), _T.LONG,
             "log.message.timestamp.difference.max.ms",
             "With CreateTime, the most a record's timestamp may differ from the leader's clock "
             "either way (each side also bounded by message.timestamp.before.max.ms and "
             "message.timestamp.after.max.ms: the tighter applies); a batch with a record "
             "further off is refused with INVALID_TIMESTAMP (9223372036854775807: no bound).",
             str(LONG_MAX)),
    TopicKey("message.timestamp.type", one_of(*TIMESTAMP_TYPES), _T.STRING,
             "log.message.timestamp.type",
             "'CreateTime' keeps the producer's timestamps; 'LogAppendTime' makes the leader "
             "stamp every batch with its own clock when it appends it.", "CreateTime"),
    TopicKey("min.insync.replicas", integer(1, INT_MAX), _T.INT, "min.insync.replicas",
             "With acks=all, the in-sync replicas a write needs; fewer answers "
             "NOT_ENOUGH_REPLICAS."),
    TopicKey("retention.bytes", integer(-1, what=_NO_LIMIT), _T.LONG, "log.retention.bytes",
             "The largest a partition may grow before its oldest segments are deleted "
             "(-1: no size limit)."),
    TopicKey("retention.ms", integer(-1, what=_NO_LIMIT), _T.LONG, "log.retention.ms",
             "How long a segment is kept after its last record was written (-1: forever)."),
    TopicKey("segment.bytes", integer(14, INT_MAX), _T.INT, "log.segment.bytes",
             "The size at which the active segment is rolled."),
    TopicKey("segment.ms", integer(1), _T.LONG, "log.roll.ms",
             "The age at which the active segment is rolled, even if not full."),
    TopicKey("unclean.leader.election.enable", boolean, _T.BOOLEAN,
             "unclean.leader.election.enable",
             "Whether a replica outside the ISR may become leader when no ISR member is left "
             "(losing the records it lacks)."),
)

#: Keys Kafka has that Sluice refuses, with the reason given to whoever sets one.
UNSUPPORTED_TOPIC_KEYS: dict[str, str] = {
    "min.compaction.lag.ms": "Sluice does not compact logs",
    "max.compaction.lag.ms": "Sluice does not compact logs",
    "min.cleanable.dirty.ratio": "Sluice does not compact logs",
    "segment.index.bytes": "the index size is fixed per broker",
    "segment.jitter.ms": "segments roll at exactly segment.ms",
    "file.delete.delay.ms": "segments are deleted at once",
    "preallocate": "segment files are not preallocated",
    "message.downconversion.enable": "Sluice serves message format v2 only",
    "message.format.version": "Sluice serves message format v2 only",
    "follower.replication.throttled.replicas": "replication is not throttled",
    "leader.replication.throttled.replicas": "replication is not throttled",
    "local.retention.ms": "there is no tiered storage",
    "local.retention.bytes": "there is no tiered storage",
    "remote.storage.enable": "there is no tiered storage",
}


def check_topic_value(key: str, raw: object) -> str:
    """One per-topic value checked and normalised as text (``True`` -> ``"true"``,
    ``" 100 "`` -> ``"100"``). Raises ConfigError naming the key: unknown (with a
    suggestion), known to Kafka but refused here (with the reason), without a value, or
    bad."""
    spec = TOPIC_CONFIG_KEYS.get(key)
    if spec is None:
        why = UNSUPPORTED_TOPIC_KEYS.get(key)
        if why is not None:
            raise ConfigError(f"topic config key {key!r} is not supported: {why}", key)
        raise ConfigError(unknown_key_message(key, TOPIC_CONFIG_KEYS, "topic config"), key)
    if raw is None:
        raise ConfigError(f"missing value for topic config key {key!r}", key)
    return _as_text(spec.parse(key, _as_text(raw)))


def validate_topic_config(values: Mapping[str, object]) -> dict[str, str]:
    """Check per-topic overrides with :func:`check_topic_value`; returns them normalised."""
    return {key: check_topic_value(key, raw) for key, raw in values.items()}


def broker_key_doc(name: str) -> str | None:
    """DescribeConfigs' documentation of broker key ``name``: for a broker-level default of a
    topic key, that topic key's documentation, said as such; None for the other broker keys
    (``docs/configuration.md`` describes every key; the key table carries no text for them)."""
    for spec in TOPIC_CONFIG_KEYS.values():
        if spec.synonym == name and name in BROKER_KEYS:
            return f"The broker-level default of the topic key {spec.name}. {spec.doc}"
    return None


def applied_topic_overrides(stored: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Of a topic's stored overrides (the store is not trusted: another tool may have written
    them), the known keys a broker applies, normalised, and the known keys it ignores, each
    with why (its value fails :func:`check_topic_value`: the key's default applies instead, as
    Kafka ignores an invalid override). Keys Sluice does not know are in neither."""
    applied: dict[str, str] = {}
    ignored: dict[str, str] = {}
    for key, raw in stored.items():
        if key not in TOPIC_CONFIG_KEYS:
            continue
        try:
            applied[key] = check_topic_value(key, raw)
        except ConfigError as e:
            ignored[key] = str(e)
    return applied, ignored


def topic_defaults(cfg: BrokerConfig) -> dict[str, str]:
    """The broker-level defaults expressed as topic keys (what a topic without overrides gets),
    in :data:`TOPIC_CONFIG_KEYS` order: the effective value of the broker synonym where Sluice
    has it, else the key's built-in value. "Never" flush settings are Kafka's
    ``Long.MAX_VALUE``; ``segment.ms`` is the effective ``log.roll.ms``/``log.roll.hours``."""
    out = {}
    for key, spec in TOPIC_CONFIG_KEYS.items():
        if spec.synonym not in BROKER_KEYS:
            out[key] = spec.builtin or ""
            continue
        value = cfg.get(spec.synonym)
        if value is None:  # only the flush keys may be unset: Kafka's "never"
            value = LONG_MAX
        out[key] = _as_text(value)
    return out
