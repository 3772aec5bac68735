"""One partition's log: an ordered list of segments, the leader-epoch file, and the offsets that
bound what may be read.

Invariants:

- offsets are contiguous across segments: each segment's base offset is the previous segment's
  ``next_offset``; ``log_start_offset <= high_watermark <= log_end_offset``;
- every appended batch was validated (CRC, magic, lengths) and carries the leader epoch of the
  leader that appended it; the epoch file has an entry where each epoch begins;
- after an unclean shutdown, ``open`` re-validates everything after the recovery point and
  truncates a torn or corrupt tail, so no torn batch is ever served.

Threading: all methods run on one thread (the reactor) except :meth:`flush`, which the broker
calls from its IO pool; ``_lock`` guards only the segment list, never an fsync.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from broker_core.log.leader_epoch import LeaderEpochFile
from broker_core.log.segment import Segment
from broker_core.wire.records import assign_offsets, iter_batches

ONE_WEEK_MS = 7 * 24 * 3600 * 1000


class OffsetOutOfRange(Exception):
    def __init__(self, offset: int, start: int, end: int) -> None:
        super().__init__(f"offset {offset} is outside the log [{start}, {end}]")
        self.offset, self.log_start_offset, self.log_end_offset = offset, start, end


class RecordTooLarge(Exception):
    """A batch larger than ``max.message.bytes``."""


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = ONE_WEEK_MS
    retention_bytes: int = -1
    retention_ms: int = ONE_WEEK_MS
    flush_messages: int | None = None
    flush_ms: int | None = None
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588

    _TOPIC_KEYS = {
        "segment.bytes": "segment_bytes", "segment.ms": "segment_ms",
        "retention.bytes": "retention_bytes", "retention.ms": "retention_ms",
        "flush.messages": "flush_messages", "flush.ms": "flush_ms",
        "index.interval.bytes": "index_interval_bytes", "max.message.bytes": "max_message_bytes",
    }

    @classmethod
    def from_topic_config(cls, defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
        """Apply per-topic keys (Kafka's names); ValueError names a bad key or value."""
        changes = {}
        for key, value in overrides.items():
            attr = cls._TOPIC_KEYS.get(key)
            if attr is None:
                raise ValueError(f"unknown log config key {key!r}")
            try:
                n = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"invalid value {value!r} for {key!r}: expected an integer") \
                    from None
            if attr in ("flush_messages", "flush_ms") and n >= (1 << 62):
                changes[attr] = None
            elif n < -1 or (n < 1 and attr in ("segment_bytes", "index_interval_bytes",
                                                "max_message_bytes", "segment_ms")):
                raise ValueError(f"invalid value {value!r} for {key!r}")
            else:
                changes[attr] = n
        return replace(defaults, **changes)


@dataclass
class AppendResult:
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    size: int
    max_timestamp: int


@dataclass
class ReadResult:
    records: bytes
    log_start_offset: int
    log_end_offset: int


@dataclass
class RecoveryReport:
    segments_checked: int = 0
    batches_checked: int = 0
    bytes_truncated: int = 0
    segments_deleted: int = 0
    epoch_entries_dropped: int = 0


def parse_dir_name(name: str) -> tuple[str, int]:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {name!r}")
    return topic, int(part)


class Log:
    """See the module docstring."""

    def __init__(self, directory: Path, config: LogConfig, time_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.topic, self.partition = parse_dir_name(directory.name)
        self.config = config
        self.time_ms = time_ms
        self.segments: list[Segment] = []
        self._lock = threading.Lock()
        self.log_start_offset = 0
        self._hw = 0
        self.recovery_point = 0
        self.unflushed_messages = 0
        self.last_flush_ms = time_ms()
        self.leader_epochs = LeaderEpochFile(directory)
        self.recovery_report: RecoveryReport | None = None

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, time_ms: Callable[[], int],
             recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = True) -> Log:
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, time_ms)
        for leftover in directory.glob("*.tmp"):
            leftover.unlink()
        bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        for base in bases:
            mtime = int(os.stat(directory / f"{base:020d}.log").st_mtime * 1000)
            log.segments.append(Segment(directory, base,
                                        index_interval_bytes=config.index_interval_bytes,
                                        created_ms=mtime))
        if not log.segments:
            log.segments.append(log._new_segment(max(log_start_offset, 0)))
        report = RecoveryReport()
        if clean_shutdown:
            for seg in log.segments:
                if not seg.load_index():
                    seg.recover(config.max_message_bytes)
                else:
                    seg.scan_tail()
        else:
            report = log._recover(recovery_point)
            log.recovery_report = report
        log.log_start_offset = max(log_start_offset, log.segments[0].base_offset)
        leo = log.log_end_offset
        dropped = log.leader_epochs.truncate_from_end(leo)
        report.epoch_entries_dropped += dropped
        log.leader_epochs.truncate_from_start(log.log_start_offset)
        log.recovery_point = leo if clean_shutdown else min(recovery_point, leo)
        if not clean_shutdown:
            log.recovery_point = leo  # everything up to here was just re-validated
        log._hw = log.log_start_offset
        return log

    def _recover(self, recovery_point: int) -> RecoveryReport:
        """Re-validate segments from the one holding the recovery point on; after the first
        truncation every later segment is garbage (offsets must stay contiguous) and goes."""
        report = RecoveryReport()
        for i, seg in enumerate(self.segments):
            following = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            if following is not None and following <= recovery_point:
                if not seg.load_index():
                    seg.recover(self.config.max_message_bytes)
                else:
                    seg.scan_tail()
                continue
            checked, truncated = seg.recover(self.config.max_message_bytes)
            report.segments_checked += 1
            report.batches_checked += checked
            report.bytes_truncated += truncated
            if truncated or (following is not None and seg.next_offset != following):
                for later in self.segments[i + 1:]:
                    report.bytes_truncated += later.size
                    report.segments_deleted += 1
                    later.delete()
                del self.segments[i + 1:]
                break
        return report

    def _new_segment(self, base_offset: int) -> Segment:
        return Segment(self.directory, base_offset,
                       index_interval_bytes=self.config.index_interval_bytes,
                       created_ms=self.time_ms())

    # -- offsets -------------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = max(self.log_start_offset, min(value, self.log_end_offset))

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # -- appending -----------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | memoryview, leader_epoch: int) -> AppendResult:
        """Validate, stamp offsets and epoch, append (see the module docstring)."""
        self._check_sizes(records)
        buf, infos = assign_offsets(records, self.log_end_offset, leader_epoch)
        if leader_epoch >= 0:
            self.leader_epochs.assign(leader_epoch, infos[0].base_offset)
        return self._append(buf, infos)

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append batches that already carry offsets and epochs (replication)."""
        self._check_sizes(records)
        data = bytes(records)
        infos = list(iter_batches(data))
        if not infos:
            raise ValueError("empty record set")
        if infos[0].base_offset != self.log_end_offset:
            raise ValueError(f"follower append starts at {infos[0].base_offset}, log ends at "
                             f"{self.log_end_offset}")
        for info in infos:
            self.leader_epochs.assign(info.partition_leader_epoch, info.base_offset)
        return self._append(data, infos)

    def _check_sizes(self, records: bytes | memoryview) -> None:
        for info in iter_batches(records, verify_crc=False):
            if info.size > self.config.max_message_bytes:
                raise RecordTooLarge(f"batch of {info.size} bytes exceeds max.message.bytes "
                                     f"{self.config.max_message_bytes}")

    def _append(self, data: bytes | bytearray, infos: list) -> AppendResult:
        self._maybe_roll_for(len(data))
        self.active.append(data, infos)
        count = sum(i.last_offset - i.base_offset + 1 for i in infos)
        self.unflushed_messages += count
        return AppendResult(infos[0].base_offset, infos[-1].last_offset, count, len(infos),
                            len(data), max(i.max_timestamp for i in infos))

    def _maybe_roll_for(self, incoming: int) -> None:
        seg = self.active
        if seg.size == 0:
            return
        if seg.size + incoming > self.config.segment_bytes or self._too_old(seg):
            self._roll()

    def _too_old(self, seg: Segment) -> bool:
        return self.time_ms() - seg.created_ms >= self.config.segment_ms

    def _roll(self) -> None:
        new = self._new_segment(self.log_end_offset)
        with self._lock:
            self.segments.append(new)

    def maybe_roll(self) -> bool:
        """Time-based roll (``segment.ms``), called by the broker's timer."""
        if self.active.size > 0 and self._too_old(self.active):
            self._roll()
            return True
        return False

    # -- reading -------------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least one
        batch when ``min_one``), none reaching ``max_offset`` (the high watermark)."""
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRange(offset, self.log_start_offset, leo)
        empty = ReadResult(b"", self.log_start_offset, leo)
        if offset == leo or (max_offset is not None and offset >= max_offset):
            return empty
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            found = seg.find(offset)
            if found is None:
                i += 1
                continue
            pos = found[0]
            limit = max_bytes if max_bytes > 0 else 0
            batches = seg.batches_from(pos, limit if limit else 1)
            if max_offset is not None:
                batches = [b for b in batches if b[3] < max_offset]
            if not batches:
                return empty
            if not min_one and batches[-1][0] + batches[-1][1] - pos > max_bytes:
                return empty
            end = batches[-1][0] + batches[-1][1]
            return ReadResult(seg.read_at(pos, end - pos), self.log_start_offset, leo)
        return empty

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        for seg in self.segments:
            if seg.max_timestamp != -1 and seg.max_timestamp < timestamp_ms and \
                    seg is not self.active:
                continue
            found = seg.timestamp_search(timestamp_ms)
            if found is not None:
                return max(found[0], self.log_start_offset), found[1]
        return None

    # -- truncation and retention --------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self.log_start_offset)
        with self._lock:
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                self.segments.pop().delete()
        self.active.truncate_to(offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._hw = min(self._hw, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            old, self.segments = self.segments, []
        for seg in old:
            seg.delete()
        self.segments.append(self._new_segment(offset))
        self.log_start_offset = offset
        self._hw = offset
        self.recovery_point = offset
        self.leader_epochs.clear()

    def delete_old_segments(self) -> int:
        """Retention by time and size; never deletes the active segment or data at or above the
        high watermark. Returns the number of segments deleted."""
        now = self.time_ms()
        cfg = self.config
        total = self.size_bytes
        doomed = []
        for i, seg in enumerate(self.segments[:-1]):
            following = self.segments[i + 1].base_offset
            if following > self._hw:
                break
            ts = seg.max_timestamp if seg.max_timestamp >= 0 else seg.created_ms
            expired = cfg.retention_ms >= 0 and now - ts > cfg.retention_ms
            oversize = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (expired or oversize):
                break
            doomed.append(seg)
            total -= seg.size
        if not doomed:
            return 0
        with self._lock:
            self.segments = self.segments[len(doomed):]
        for seg in doomed:
            seg.delete()
        self.log_start_offset = self.segments[0].base_offset
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        return len(doomed)

    # -- durability ----------------------------------------------------------------------------

    def should_flush(self) -> bool:
        cfg = self.config
        if cfg.flush_messages is not None and self.unflushed_messages >= cfg.flush_messages:
            return True
        return (cfg.flush_ms is not None and self.unflushed_messages > 0
                and self.time_ms() - self.last_flush_ms >= cfg.flush_ms)

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment with data past the recovery point (blocking; IO thread)."""
        target = self.log_end_offset if up_to is None else up_to
        pending = self.unflushed_messages
        with self._lock:
            segs = [s for s in self.segments if s.next_offset > self.recovery_point]
        for seg in segs:
            seg.flush()
        self.recovery_point = max(self.recovery_point, target)
        self.unflushed_messages = max(0, self.unflushed_messages - pending)
        self.last_flush_ms = self.time_ms()

    def close(self) -> None:
        with self._lock:
            for seg in self.segments:
                seg.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
