"""Per-partition log settings, with Kafka's topic-level key names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from broker_core.config.topic_keys import COMPRESSION_TYPES, TIMESTAMP_TYPES

ONE_WEEK_MS = 7 * 24 * 3600 * 1000
INT32_MAX = (1 << 31) - 1
# Kafka writes "never" for flush.messages / flush.ms as Long.MAX_VALUE; anything this large means
# "no flush policy", which LogConfig spells None.
NEVER = (1 << 63) - 1

# topic config key -> (attribute, smallest legal value, largest legal value)
_TOPIC_KEYS: dict[str, tuple[str, int, int]] = {
    "segment.bytes": ("segment_bytes", 1, INT32_MAX),  # positions in the index are int32
    "segment.ms": ("segment_ms", 1, NEVER),
    "retention.bytes": ("retention_bytes", -1, NEVER),
    "retention.ms": ("retention_ms", -1, NEVER),
    "flush.messages": ("flush_messages", 1, NEVER),
    "flush.ms": ("flush_ms", 0, NEVER),
    "index.interval.bytes": ("index_interval_bytes", 0, INT32_MAX),
    "max.message.bytes": ("max_message_bytes", 0, INT32_MAX),
    "segment.index.bytes": ("segment_index_bytes", 8, INT32_MAX),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", 0, NEVER),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 0, NEVER),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 0, NEVER),
}
_BOUNDS = {attr: (key, lo, hi) for key, (attr, lo, hi) in _TOPIC_KEYS.items()}
# topic config key -> (attribute, the values it may take)
_TEXT_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "compression.type": ("compression_type", COMPRESSION_TYPES),
    "message.timestamp.type": ("message_timestamp_type", TIMESTAMP_TYPES),
}
_CHOICES = {attr: (key, choices) for key, (attr, choices) in _TEXT_KEYS.items()}


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log. Every field is range-checked at construction, so a
    LogConfig that exists is usable; ``-1`` retention means unlimited, ``None`` flush settings
    mean "leave flushing to the operating system"."""

    segment_bytes: int = 1 << 30
    segment_ms: int = ONE_WEEK_MS
    retention_bytes: int = -1
    retention_ms: int = ONE_WEEK_MS
    flush_messages: int | None = None
    flush_ms: int | None = None
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    segment_index_bytes: int = 10 << 20
    #: ``producer``: batches are stored with the producer's codec; any other: recompressed.
    compression_type: str = "producer"
    #: ``LogAppendTime``: the leader stamps each batch with its clock as it appends it.
    message_timestamp_type: str = "CreateTime"
    #: With CreateTime, the most a record's timestamp may differ from the leader's clock
    #: (``NEVER``: no check).
    message_timestamp_difference_max_ms: int = NEVER
    #: With CreateTime, how far before / after the leader's clock a record's timestamp may be
    #: (``NEVER``: no bound). Kafka 4's defaults: the past unbounded, the future one hour.
    message_timestamp_before_max_ms: int = NEVER
    message_timestamp_after_max_ms: int = 3_600_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _CHOICES:
                key, choices = _CHOICES[f.name]
                if value not in choices:
                    raise ValueError(f"{key} ({f.name}) must be one of {', '.join(choices)}, "
                                     f"got {value!r}")
                continue
            key, lo, hi = _BOUNDS[f.name]
            if value is None and f.name in ("flush_messages", "flush_ms"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{key} ({f.name}) must be an integer, got {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"{key} ({f.name}) must be between {lo} and {hi}, got {value}")

    @property
    def max_index_entries(self) -> int:
        """How many entries a segment's offset index may hold before the segment rolls."""
        return self.segment_index_bytes // 8

    @classmethod
    def from_topic_config(cls, defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
        """``defaults`` with per-topic overrides applied (Kafka's key names, string values).

        Raises ValueError naming the key for an unknown key or a value that is not an integer in
        the key's range. ``flush.messages`` / ``flush.ms`` of Long.MAX_VALUE mean "never".
        """
        changes: dict[str, int | str | None] = {}
        for key, value in overrides.items():
            if key in _TEXT_KEYS:
                attr, choices = _TEXT_KEYS[key]
                if value not in choices:
                    raise ValueError(f"invalid value {value!r} for {key}: must be one of "
                                     f"{', '.join(choices)}")
                changes[attr] = value
                continue
            spec = _TOPIC_KEYS.get(key)
            if spec is None:
                raise ValueError(f"unknown log config key {key!r}; known keys: "
                                 f"{', '.join(sorted([*_TOPIC_KEYS, *_TEXT_KEYS]))}")
            attr, lo, hi = spec
            try:
                n = int(str(value).strip())
            except ValueError:
                raise ValueError(f"invalid value {value!r} for {key}: expected an integer") \
                    from None
            if attr in ("flush_messages", "flush_ms") and n >= NEVER:
                changes[attr] = None
                continue
            if not lo <= n <= hi:
                raise ValueError(f"invalid value {value!r} for {key}: must be between {lo} and "
                                 f"{hi}")
            changes[attr] = n
        return replace(defaults, **changes)
