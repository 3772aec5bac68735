"""When a log rolls its active segment and which of its oldest segments retention deletes:
decisions only, over the segments and the topic's :class:`~broker_core.log.config.LogConfig`.
The log carries them out (under its lock).

Invariants: an empty segment never rolls; retention never chooses a segment holding a batch at
or above the high watermark, and chooses only a prefix of the segment list (the oldest).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.log.config import INT32_MAX, LogConfig
from broker_core.log.segment import Segment


def too_old(seg: Segment, config: LogConfig, time_ms: Callable[[], int]) -> bool:
    """``segment.ms`` has passed since the segment's roll base time."""
    return seg.roll_base_ms is not None and \
        time_ms() - seg.roll_base_ms >= config.segment_ms


def should_roll(seg: Segment, incoming: int, last_offset: int, config: LogConfig,
                time_ms: Callable[[], int]) -> bool:
    """Whether ``incoming`` bytes ending at ``last_offset`` go to a new segment instead of
    the active ``seg``: it is full, old, its index full, or the offsets would not fit."""
    if seg.size == 0:
        return False
    cfg = config
    return (seg.size + incoming > cfg.segment_bytes
            or too_old(seg, config, time_ms)
            or len(seg.index) >= cfg.max_index_entries
            # index entries hold offsets relative to the segment base as int32
            or last_offset - seg.base_offset > INT32_MAX)


def expired_segments(segments: list[Segment], *, log_start_offset: int, high_watermark: int,
                     config: LogConfig, now_ms: int) -> list[Segment]:
    """Retention: the oldest segments, while they are past ``retention.ms`` (by their largest
    timestamp), while the log stays at least ``retention.bytes`` without them, or while they
    lie wholly below the log start; never one holding a batch at or above the high
    watermark."""
    cfg = config
    total = sum(s.size for s in segments)
    doomed: list[Segment] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg.size == 0 or seg.next_offset > high_watermark:
            break
        below_start = i < last and segments[i + 1].base_offset <= log_start_offset
        ts = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms
        expired = cfg.retention_ms >= 0 and now_ms - ts > cfg.retention_ms
        oversize = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
        if not (below_start or expired or oversize):
            break
        doomed.append(seg)
        total -= seg.size
    return doomed
