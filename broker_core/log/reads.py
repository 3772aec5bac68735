"""The read path of a log, over its segment list: fetches of whole batches and ListOffsets'
lookups by time. The log checks the offsets asked for against its bounds first.

Invariants: a read returns whole batches only, never a batch that failed its checks (a
segment's :class:`~broker_core.log.segment.CorruptBatch` becomes :class:`CorruptLogError`
naming the partition), and never looks at records; each segment touched is read once.
"""

from __future__ import annotations

from broker_core.log.errors import CorruptLogError
from broker_core.log.segment import CorruptBatch, Segment


def segment_index(segments: list[Segment], offset: int) -> int:
    """Index of the last segment whose base offset is <= ``offset`` (0 if none is)."""
    lo, hi = 0, len(segments) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if segments[mid].base_offset <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def read_batches(segments: list[Segment], offset: int, max_bytes: int, *,
                 max_offset: int | None, min_one: bool, topic: str, partition: int) -> bytes:
    """Whole batches from the one containing ``offset`` (which the caller checked lies in
    the log, below its end), as :meth:`Log.read <broker_core.log.log.Log.read>` describes."""
    chunks: list[bytes] = []
    budget = max_bytes
    need_one = min_one
    for seg in segments[segment_index(segments, offset):]:
        if offset >= seg.next_offset:
            continue
        offset = max(offset, seg.base_offset)
        try:
            data, exhausted = seg.read(offset, budget, max_offset, need_one)
        except CorruptBatch as e:
            raise CorruptLogError(topic, partition, e.offset,
                                  f"{e.reason} (byte {e.position} of {e.segment})") from None
        if data:
            chunks.append(data)
            budget -= len(data)
            need_one = False
        if not exhausted or budget <= 0:
            break
        offset = seg.next_offset
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def offset_for_timestamp(segments: list[Segment], log_start_offset: int,
                         timestamp_ms: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record at or after the log start whose timestamp
    is >= ``timestamp_ms`` (ListOffsets by time), or None."""
    for seg in segments:
        if seg.next_offset <= log_start_offset:
            continue
        found = seg.find_timestamp(timestamp_ms, log_start_offset)
        if found is not None:
            return found
    return None


def offset_for_max_timestamp(segments: list[Segment],
                             log_start_offset: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp in the log
    (ListOffsets MAX_TIMESTAMP, KIP-734), or None for an empty log."""
    best: Segment | None = None
    for seg in segments:
        if seg.next_offset > log_start_offset and seg.size and \
                (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None or best.max_timestamp < 0:
        return None
    return best.max_timestamp_record(log_start_offset)
