"""Typed broker configuration with Kafka's key names.

Sources, lowest precedence first: defaults, a Java-properties file (``--config``), ``--set
key=value`` pairs and the ``twistd broker`` options. Every value is parsed and checked at start;
a bad one stops the broker with a :class:`ConfigError` that names the key. ``docs/configuration.md``
lists every key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """A configuration problem, with a message naming the key."""


def _int(lo: int | None = None) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            v = int(raw.strip())
        except ValueError:
            raise ConfigError(f"invalid value {raw!r} for {key!r}: expected an integer") from None
        if lo is not None and v < lo:
            raise ConfigError(f"invalid value {raw!r} for {key!r}: must be >= {lo}")
        return v
    return parse


def _opt_long(key: str, raw: str) -> int | None:
    v = _int(1)(key, raw)
    return None if v >= LONG_MAX else v


def _bool(key: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ConfigError(f"invalid value {raw!r} for {key!r}: expected true or false")


def _str(key: str, raw: str) -> str:
    return raw.strip()


def _opt_str(key: str, raw: str) -> str | None:
    return raw.strip() or None


def _hostport(key: str, raw: str) -> str | None:
    raw = raw.strip()
    if not raw:
        return None
    raw = raw.split("://", 1)[-1]  # accept Kafka's PLAINTEXT://host:port too
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"invalid value {raw!r} for {key!r}: expected host:port")
    return f"{host}:{port}"


#: key -> (attribute, parser, default as text or None for "unset")
KEYS: dict[str, tuple[str, Callable[[str, str], Any], str | None]] = {
    "broker.id": ("broker_id", _int(0), None),
    "listeners": ("listeners", _str, "tcp:9092"),
    "advertised.listeners": ("advertised_listeners", _hostport, ""),
    "zookeeper.connect": ("zookeeper_connect", _str, None),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int(1000), "18000"),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int(100), "18000"),
    "log.dirs": ("log_dirs", _str, None),
    "metrics.listener": ("metrics_listener", _opt_str, ""),
    "num.partitions": ("num_partitions", _int(1), "1"),
    "default.replication.factor": ("default_replication_factor", _int(1), "1"),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool, "true"),
    "delete.topic.enable": ("delete_topic_enable", _bool, "true"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1024), "104857600"),
    "message.max.bytes": ("message_max_bytes", _int(0), "1048588"),
    "log.segment.bytes": ("log_segment_bytes", _int(14), "1073741824"),
    "log.roll.ms": ("log_roll_ms", _int(1), None),
    "log.roll.hours": ("log_roll_hours", _int(1), "168"),
    "log.retention.ms": ("log_retention_ms_raw", _int(-1), None),
    "log.retention.minutes": ("log_retention_minutes", _int(-1), None),
    "log.retention.hours": ("log_retention_hours", _int(-1), "168"),
    "log.retention.bytes": ("log_retention_bytes", _int(-1), "-1"),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(1), "300000"),
    "log.flush.interval.messages": ("log_flush_interval_messages", _opt_long, str(LONG_MAX)),
    "log.flush.interval.ms": ("log_flush_interval_ms", _opt_long, str(LONG_MAX)),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", _int(1), "1000"),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int(0), "4096"),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int(0), "500"),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int(1), "30000"),
    "min.insync.replicas": ("min_insync_replicas", _int(1), "1"),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool, "false"),
    "request.timeout.ms": ("request_timeout_ms", _int(1), "30000"),
    "controller.socket.timeout.ms": ("controller_socket_timeout_ms", _int(1), "30000"),
    "fetch.purgatory.purge.interval.requests": (
        "fetch_purgatory_purge_interval_requests", _int(1), "1000"),
    "producer.purgatory.purge.interval.requests": (
        "producer_purgatory_purge_interval_requests", _int(1), "1000"),
    "broker.rack": ("broker_rack", _opt_str, ""),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool, "true"),
}

REQUIRED = ("broker.id", "zookeeper.connect", "log.dirs")


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's configuration (see the module docstring). Attribute names are the Kafka keys
    with dots as underscores; :meth:`get` takes the Kafka key."""

    broker_id: int
    listeners: str
    advertised_listeners: str | None
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    log_dirs: str
    metrics_listener: str | None
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    socket_request_max_bytes: int
    message_max_bytes: int
    log_segment_bytes: int
    log_roll_ms: int | None
    log_roll_hours: int
    log_retention_ms_raw: int | None
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_messages: int | None
    log_flush_interval_ms: int | None
    log_flush_scheduler_interval_ms: int
    log_index_interval_bytes: int
    replica_fetch_wait_max_ms: int
    replica_lag_time_max_ms: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    request_timeout_ms: int
    controller_socket_timeout_ms: int
    fetch_purgatory_purge_interval_requests: int
    producer_purgatory_purge_interval_requests: int
    broker_rack: str | None
    controlled_shutdown_enable: bool

    @property
    def log_retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms, then .minutes, then .hours."""
        if self.log_retention_ms_raw is not None:
            return self.log_retention_ms_raw
        if self.log_retention_minutes is not None:
            return self.log_retention_minutes * 60_000
        return self.log_retention_hours * 3_600_000

    @property
    def log_roll_effective_ms(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3_600_000

    def get(self, key: str) -> Any:
        if key == "log.retention.ms":
            return self.log_retention_ms
        if key not in KEYS:
            raise ConfigError(_unknown(key))
        return getattr(self, KEYS[key][0])

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> BrokerConfig:
        for key in values:
            if key not in KEYS:
                raise ConfigError(_unknown(key))
        missing = [k for k in REQUIRED if not str(values.get(k, "")).strip()]
        if missing:
            raise ConfigError(f"missing required config key {missing[0]!r}")
        kwargs: dict[str, Any] = {}
        for key, (attr, parse, default) in KEYS.items():
            raw = values.get(key, default)
            kwargs[attr] = None if raw is None else parse(key, str(raw))
        return cls(**kwargs)

    @classmethod
    def from_sources(cls, file: Path | None, overrides: Mapping[str, str]) -> BrokerConfig:
        values: dict[str, str] = {}
        if file is not None:
            values.update(read_properties(Path(file)))
        values.update(overrides)
        return cls.from_mapping(values)


assert {f.name for f in fields(BrokerConfig)} == {a for a, _, _ in KEYS.values()}


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, list(KEYS) + list(TOPIC_CONFIG_KEYS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown config key {key!r}{hint}"


def read_properties(path: Path) -> dict[str, str]:
    """Java-properties style: ``key=value`` (or ``key: value``), ``#``/``!`` comments."""
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in s:
                k, v = s.split(sep, 1)
                out[k.strip()] = v.strip()
                break
        else:
            raise ConfigError(f"{path}:{n}: expected key=value, got {s!r}")
    return out


# -- topic-level configuration ------------------------------------------------------------------

def _policy(key: str, raw: str) -> str:
    if raw.strip() == "delete":
        return "delete"
    if raw.strip() == "compact":
        raise ConfigError(f"invalid value {raw!r} for {key!r}: log compaction is not supported "
                          "(only 'delete')")
    raise ConfigError(f"invalid value {raw!r} for {key!r}: expected 'delete'")


TOPIC_CONFIG_KEYS: dict[str, Callable[[str, str], Any]] = {
    "retention.ms": _int(-1),
    "retention.bytes": _int(-1),
    "segment.bytes": _int(14),
    "segment.ms": _int(1),
    "flush.messages": _int(1),
    "flush.ms": _int(0),
    "max.message.bytes": _int(0),
    "index.interval.bytes": _int(0),
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _bool,
    "cleanup.policy": _policy,
}


def validate_topic_config(values: Mapping[str, str | None]) -> dict[str, str]:
    """Check per-topic overrides; returns them normalised. ConfigError names a bad key."""
    out = {}
    for key, raw in values.items():
        parse = TOPIC_CONFIG_KEYS.get(key)
        if parse is None:
            close = difflib.get_close_matches(key, list(TOPIC_CONFIG_KEYS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown topic config key {key!r}{hint}")
        if raw is None:
            raise ConfigError(f"missing value for topic config {key!r}")
        v = parse(key, str(raw))
        out[key] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def topic_defaults(cfg: BrokerConfig) -> dict[str, str]:
    """Broker-level defaults expressed as topic keys."""
    return {
        "retention.ms": str(cfg.log_retention_ms),
        "retention.bytes": str(cfg.log_retention_bytes),
        "segment.bytes": str(cfg.log_segment_bytes),
        "segment.ms": str(cfg.log_roll_effective_ms),
        "max.message.bytes": str(cfg.message_max_bytes),
        "index.interval.bytes": str(cfg.log_index_interval_bytes),
        "min.insync.replicas": str(cfg.min_insync_replicas),
        "unclean.leader.election.enable": str(cfg.unclean_leader_election_enable).lower(),
        "cleanup.policy": "delete",
    }
