"""Offsets as Spark's Kafka source spells them, and offset ranges (pure: no I/O, no pyspark).

A *partition offsets* map is ``{(topic, partition): offset}``; its JSON form (options, streaming
checkpoints) is Spark-Kafka's ``{"topic": {"0": 23, "1": -2}}``, where ``-2`` means the earliest
offset and ``-1`` the latest. An :class:`OffsetRange` is the half-open ``[start, end)`` of one
partition that one Spark task reads.

Invariants kept by the functions here:

- :func:`split_ranges` covers exactly the offsets of its input (no gap, no overlap) and never
  returns an empty range;
- :func:`rate_limit` never moves a partition backwards nor past the latest offset, and moves
  every partition that has data by at least one offset (Spark's "don't starve small partitions").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from broker_core.wire.topic_partition import TopicPartition

EARLIEST = -2
LATEST = -1

PartitionOffsets = dict[TopicPartition, int]


class OffsetError(ValueError):
    """A bad offsets option or checkpoint; the message names the option."""


class OffsetRange(NamedTuple):
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class OffsetSpec(NamedTuple):
    """A parsed ``startingOffsets`` / ``endingOffsets``: ``kind`` is ``"earliest"``,
    ``"latest"`` or ``"specific"`` (then ``offsets`` holds the JSON's partitions, with -2 / -1
    still symbolic)."""

    kind: str
    offsets: PartitionOffsets

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls("earliest", {})

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls("latest", {})


def parse_offset_spec(option: str, text: str) -> OffsetSpec:
    """``earliest``, ``latest`` or the JSON form; raises :class:`OffsetError` naming ``option``."""
    word = text.strip()
    if word.lower() in ("earliest", "latest"):
        return OffsetSpec(word.lower(), {})
    return OffsetSpec("specific", parse_offsets_json(option, word))


def parse_offsets_json(option: str, text: str) -> PartitionOffsets:
    """The JSON form ``{"topic": {"0": 23}}`` as a partition offsets map."""
    example = '{"topic": {"0": 23, "1": -2}}'
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise OffsetError(f"option {option!r}: expected 'earliest', 'latest' or JSON like "
                          f"{example}, got {text!r} ({e})") from None
    return offsets_from_json_dict(option, doc)


def offsets_from_json_dict(option: str, doc: object) -> PartitionOffsets:
    """The parsed-JSON form (as stored in a checkpoint) as a partition offsets map."""
    example = '{"topic": {"0": 23, "1": -2}}'
    if not isinstance(doc, dict) or not doc:
        raise OffsetError(f"option {option!r}: expected a JSON object of topics like {example}, "
                          f"got {json.dumps(doc)}")
    out: PartitionOffsets = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OffsetError(f"option {option!r}: topic {topic!r} must map partition numbers "
                              f"to offsets (like {example}), got {json.dumps(parts)}")
        for p, off in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise OffsetError(f"option {option!r}: partition {p!r} of topic {topic!r} is "
                                  "not a number") from None
            if partition < 0:
                raise OffsetError(f"option {option!r}: partition {partition} of topic {topic!r} "
                                  "is negative")
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise OffsetError(f"option {option!r}: offset {off!r} for {topic}-{partition} "
                                  "must be an offset >= 0, -2 (earliest) or -1 (latest)")
            out[(topic, partition)] = off
    return out


def offsets_to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form of ``offsets``: topics and partitions in sorted order, so equal maps
    serialise equally (Spark compares offsets by their JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition) in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def parse_assign(option: str, text: str) -> dict[str, list[int]]:
    """``assign``'s JSON ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise OffsetError(f"option {option!r}: expected JSON like "
                          f'{{"topicA": [0, 1]}}, got {text!r} ({e})') from None
    if not isinstance(doc, dict) or not doc:
        raise OffsetError(f"option {option!r}: expected a JSON object of topics like "
                          f'{{"topicA": [0, 1]}}, got {text!r}')
    out: dict[str, list[int]] = {}
    for topic, parts in doc.items():
        if (not isinstance(parts, list) or not parts
                or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                           for p in parts)):
            raise OffsetError(f"option {option!r}: topic {topic!r} must map to a non-empty list "
                              f"of partition numbers, got {json.dumps(parts)}")
        out[topic] = sorted(set(parts))
    return out


def resolve(option: str, spec: OffsetSpec, partitions: Iterable[TopicPartition],
            earliest: Callable[[list[TopicPartition]], PartitionOffsets],
            latest: Callable[[list[TopicPartition]], PartitionOffsets],
            *, allow_earliest: bool = True, allow_latest: bool = True) -> PartitionOffsets:
    """Concrete offsets for ``partitions`` under ``spec``.

    ``earliest`` / ``latest`` look offsets up (only for the partitions that need them). As in
    Spark's Kafka source, a JSON spec must name exactly the subscribed partitions; ``-2`` /
    ``-1`` are refused where the option does not allow them (``latest`` as a batch start,
    ``earliest`` as an end)."""
    parts = sorted(set(partitions))
    if spec.kind == "earliest":
        if not allow_earliest:
            raise OffsetError(f"option {option!r}: 'earliest' is not allowed here")
        return dict(earliest(parts))
    if spec.kind == "latest":
        if not allow_latest:
            raise OffsetError(f"option {option!r}: 'latest' is not allowed for batch queries "
                              "(use 'earliest' or specific offsets)")
        return dict(latest(parts))
    named = set(spec.offsets)
    if named != set(parts):
        missing = sorted(set(parts) - named)
        extra = sorted(named - set(parts))
        detail = []
        if missing:
            detail.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            detail.append("not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OffsetError(f"option {option!r}: specific offsets must name every subscribed "
                          f"partition (-2 for earliest, -1 for latest): {'; '.join(detail)}")
    out: PartitionOffsets = {}
    want_e = [tp for tp in parts if spec.offsets[tp] == EARLIEST]
    want_l = [tp for tp in parts if spec.offsets[tp] == LATEST]
    if want_e and not allow_earliest:
        raise OffsetError(f"option {option!r}: -2 (earliest) is not allowed here "
                          f"({', '.join(f'{t}-{p}' for t, p in want_e)})")
    if want_l and not allow_latest:
        raise OffsetError(f"option {option!r}: -1 (latest) is not allowed for batch queries "
                          f"({', '.join(f'{t}-{p}' for t, p in want_l)})")
    out.update(earliest(want_e) if want_e else {})
    out.update(latest(want_l) if want_l else {})
    for tp in parts:
        if spec.offsets[tp] >= 0:
            out[tp] = spec.offsets[tp]
    return out


def batch_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
                 ) -> list[OffsetRange]:
    """One range per partition of ``start`` (which must equal ``end``'s partitions), sorted;
    an end before its start raises :class:`OffsetError` naming ``endingOffsets``."""
    out = []
    for tp in sorted(start):
        s, e = start[tp], end[tp]
        if e < s:
            raise OffsetError(f"option 'endingOffsets': {tp[0]}-{tp[1]} ends at {e}, before "
                              f"its startingOffsets {s}")
        out.append(OffsetRange(tp[0], tp[1], s, e))
    return out


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None
                 ) -> list[OffsetRange]:
    """Spark's ``KafkaOffsetRangeCalculator``: with fewer non-empty ranges than
    ``min_partitions``, cut each range into pieces in proportion to its share of all offsets
    (at least one piece per range); empty ranges are dropped either way."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        # Spark's Math.round: half up.
        parts = max(int(r.size / total * min_partitions + 0.5), 1)
        remaining, start = r.size, r.start
        for i in range(parts):
            this = remaining // (parts - i)  # the last piece absorbs the rounding
            remaining -= this
            end = min(start + this, r.end)
            if end > start:
                out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> PartitionOffsets:
    """The end offsets of a micro-batch reading at most about ``max_rows`` offsets from
    ``start`` towards ``latest``, shared in proportion to each partition's backlog (Spark's
    ``KafkaMicroBatchStream.rateLimit``: a partition with a backlog gets at least one offset,
    so the total may exceed ``max_rows`` by up to one per partition)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items()
             if tp in start and end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        share = max_rows * (size / total)
        step = int(-(-share // 1)) if share < 1 else int(share)
        out[tp] = min(end, start[tp] + step)
    return out
