"""The per-topic keys Sluice accepts (:data:`TOPIC_CONFIG_KEYS`), those of Kafka's it refuses,
and the checks every topic API applies to a topic's overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_core.config.parsing import (
    INT_MAX,
    LONG_MAX,
    ConfigError,
    Parser,
    as_text,
    bad_value,
    boolean,
    integer,
    one_of,
    unknown_key_message,
)
from broker_core.wire.messages.describe_configs import ConfigType


def cleanup_policy(key: str, raw: str) -> str:
    """Only ``delete``: Sluice does not compact logs."""
    policies = [p.strip().lower() for p in raw.split(",") if p.strip()]
    if policies == ["delete"]:
        return "delete"
    if "compact" in policies:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: log compaction is not supported "
                          "(only 'delete')", key)
    raise bad_value(key, raw, "'delete'")


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
    :data:`~broker_core.config.broker_config.BROKER_KEYS`): it then always has Kafka's
    default. ``doc`` says what the key does in Sluice (``docs/configuration.md`` repeats it);
    a key stored without effect says so."""

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
    return as_text(spec.parse(key, as_text(raw)))


def validate_topic_config(values: Mapping[str, object]) -> dict[str, str]:
    """Check per-topic overrides with :func:`check_topic_value`; returns them normalised."""
    return {key: check_topic_value(key, raw) for key, raw in values.items()}


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

