"""One partition's log: an ordered list of segments, the leader-epoch file, and the offsets that
bound what may be read.

Invariants:

- offsets are contiguous across segments: each segment's base offset is the previous segment's
  ``next_offset``; ``log_start_offset <= high_watermark <= log_end_offset`` and
  ``recovery_point <= log_end_offset``;
- every appended batch was validated (magic, lengths, CRC) and carries the leader epoch it was
  appended under; the epoch file has an entry where each epoch begins and none past the end;
- after an unclean shutdown, :meth:`Log.open` re-validates everything after the recovery point;
  at the first invalid batch (in any segment it looks at) the log ends: that segment is cut
  there and every later segment is deleted, so the offsets never have a hole;
- a read never returns a batch that failed its checks: bytes trusted at open are checked the
  first time a read returns them, and a failure raises :class:`CorruptLogError` (an OSError,
  so the broker answers KAFKA_STORAGE_ERROR and treats it as a failing disk);
- everything below ``recovery_point`` has been fsynced.

Open files: the active segment's ``.log`` stays open; rolled segments' ``.log`` files are opened
on demand through the :class:`~broker_core.log.open_segments.OpenSegments` LRU (shared by the
logs of a manager); index files are opened only to write the entries they lack (at a roll,
truncation, flush and clean close).

Threading: every method runs on one thread (the reactor) except :meth:`Log.flush`, which the
broker runs on an IO thread while appends continue. ``_lock`` guards the segment list, the
recovery point and the truncation counter, and is only ever held briefly — never across an
fsync — so an append never waits for a disk flush.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from broker_core.log import producer_snapshot
from broker_core.log.checkpoints import TMP_SUFFIX, CheckpointError, fsync_dir
from broker_core.log.config import INT32_MAX, LogConfig
from broker_core.log.leader_epoch import FILE_NAME as EPOCH_FILE_NAME
from broker_core.log.leader_epoch import LeaderEpochFile
from broker_core.log.leader_rewrite import as_create_time, check_timestamps, rewrite_for_topic
from broker_core.log.open_segments import OpenSegments
from broker_core.log.producer_snapshot import SnapshotError, snapshot_offsets
from broker_core.log.producer_state import BatchMetadata, ProducerStateError, ProducerStateManager
from broker_core.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptBatch,
    Segment,
)
from broker_core.log.validator import validate_records
from broker_core.wire.records import (
    LOG_OVERHEAD,
    BatchInfo,
    assign_offsets,
    batch_size_at,
    iter_batches,
)

DELETE_SUFFIX = "-delete"
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class OffsetOutOfRange(Exception):
    """A read outside ``[log_start_offset, log_end_offset]`` -> OFFSET_OUT_OF_RANGE."""

    error_code_name = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the log [{log_start_offset}, "
                         f"{log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLarge(Exception):
    """A batch larger than ``max.message.bytes`` -> MESSAGE_TOO_LARGE."""

    error_code_name = "MESSAGE_TOO_LARGE"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"record batch of {size} bytes exceeds max.message.bytes {limit}")
        self.size = size
        self.limit = limit


class UnexpectedAppendOffset(ValueError):
    """A follower append whose batches do not continue the log at its end offset."""

    def __init__(self, first_offset: int, expected: int) -> None:
        super().__init__(f"follower append has a batch at offset {first_offset}, the log "
                         f"expects offset {expected}")
        self.first_offset = first_offset
        self.expected = expected


class CorruptLogError(OSError):
    """A stored batch failed its checks (framing, CRC, offsets continuing, epochs) when read.

    An OSError (errno EIO: the disk gave back bad bytes), so every reader that handles a
    failing disk handles this too: the replica manager answers KAFKA_STORAGE_ERROR for the
    partition instead of the bytes."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(errno.EIO, f"corrupt log {topic}-{partition} at offset {offset}: "
                                    f"{reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class LogClosed(RuntimeError):
    """The log was closed or deleted; nothing may be appended or read any more."""


@dataclass
class AppendResult:
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    size: int
    max_timestamp: int
    #: A retried idempotent batch: nothing was appended, the offsets are the original's.
    duplicate: bool = False


@dataclass
class ReadResult:
    records: bytes
    log_start_offset: int
    log_end_offset: int


@dataclass
class RecoveryReport:
    """What :meth:`Log.open` found and repaired, for the broker to log and count."""

    clean_shutdown: bool = True
    recovery_point: int = 0
    segments_checked: int = 0
    batches_checked: int = 0
    bytes_truncated: int = 0
    segments_deleted: int = 0
    indexes_rebuilt: int = 0
    epoch_entries_dropped: int = 0
    epoch_entries_added: int = 0
    epoch_file_rebuilt: bool = False
    #: Producer-state snapshots that failed their checks (ignored and deleted), and why.
    snapshots_ignored: int = 0
    snapshot_problem: str = ""
    #: Batches replayed into the producer state (after the snapshot used, if any).
    producer_batches_replayed: int = 0
    #: Where the log now ends when recovery cut it (-1 if it cut nothing), and why.
    truncated_to: int = -1
    reason: str = ""

    _NOT_REPAIRS = ("clean_shutdown", "recovery_point", "segments_checked", "batches_checked",
                    "truncated_to", "reason", "snapshot_problem", "producer_batches_replayed")

    @property
    def changed(self) -> bool:
        """True if opening the log repaired anything."""
        return any(getattr(self, f.name) for f in fields(self)
                   if f.name not in self._NOT_REPAIRS)

    def describe(self) -> str:
        """One line for the broker log: what was checked, what was cut and why."""
        how = ("after a clean shutdown" if self.clean_shutdown
               else f"after an unclean shutdown, from recovery point {self.recovery_point}")
        parts = [f"{how}: checked {self.segments_checked} segment(s), "
                 f"{self.batches_checked} batches"]
        if self.truncated_to >= 0:
            parts.append(f"truncated the log to offset {self.truncated_to} ({self.reason}): "
                         f"{self.bytes_truncated} bytes, {self.segments_deleted} later "
                         "segment(s) deleted")
        elif self.bytes_truncated:
            parts.append(f"truncated {self.bytes_truncated} bytes")
        parts.append(f"dropped {self.epoch_entries_dropped} leader-epoch entries")
        if self.epoch_entries_added:
            parts.append(f"added {self.epoch_entries_added} from the batches")
        if self.epoch_file_rebuilt:
            parts.append("rebuilt the leader-epoch file")
        if self.indexes_rebuilt:
            parts.append(f"rebuilt {self.indexes_rebuilt} index(es)")
        if self.snapshots_ignored:
            parts.append(f"ignored {self.snapshots_ignored} producer-state snapshot(s) "
                         f"({self.snapshot_problem})")
        return "; ".join(parts)


def check_topic_name(topic: str) -> None:
    """Kafka's rule for topic names (which become directory names): 1-249 characters of
    ``[A-Za-z0-9._-]``, not ``.`` or ``..``. Raises ValueError naming the problem."""
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"illegal topic name {topic!r}: use 1-249 characters from "
                         "[A-Za-z0-9._-], not '.' or '..'")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_dir_name(name: str) -> tuple[str, int]:
    """``(topic, partition)`` from a directory name ``<topic>-<partition>``; topics may contain
    ``-``, so the partition is what follows the last one. Raises ValueError."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not part.isascii():
        raise ValueError(f"not a partition directory name: {name!r}")
    check_topic_name(topic)
    return topic, int(part)


def whole_batches_length(data: bytes | bytearray | memoryview) -> int:
    """Length of the prefix of ``data`` made of batches whose declared size fits (no other
    check): a fetch response may end with a partial batch, which a follower ignores."""
    pos = 0
    end = len(data)
    while True:
        size = batch_size_at(data, pos)
        if size is None or size < LOG_OVERHEAD or pos + size > end:
            return pos
        pos += size


class Log:
    """See the module docstring. Build one with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, time_ms: Callable[[], int],
                 open_segments: OpenSegments | None = None) -> None:
        self.directory = directory
        # Shared with the manager's other logs; a log opened on its own gets its own.
        self.open_segments = open_segments if open_segments is not None else OpenSegments()
        self.topic, self.partition = parse_dir_name(directory.name)
        self.config = config
        self.time_ms = time_ms
        self.segments: list[Segment] = []
        self.leader_epochs = LeaderEpochFile(directory, lambda: self.log_end_offset)
        #: Idempotent producers' state, as of the log end (broker_core.log.producer_state).
        self.producer_state = ProducerStateManager()
        self.track_producers = True
        self.log_start_offset = 0
        self.recovery_point = 0
        self.recovery_report = RecoveryReport()
        self.last_flush_ms = time_ms()
        self._hw = 0
        self._lock = threading.Lock()
        self._appended_messages = 0
        self._flushed_messages = 0
        self._truncations = 0  # bumped by truncation so a flush in flight cannot over-advance
        self._dir_dirty = False  # segment files created or deleted since the last flush
        self._closed = False

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, time_ms: Callable[[], int],
             recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = True, open_segments: OpenSegments | None = None,
             track_producers: bool = True) -> Log:
        """Open (or create) the log in ``directory``.

        After a clean shutdown the indexes are trusted, and only the batches after the last
        index entry of each segment are walked (those of the active segment with their CRCs).
        Otherwise every segment holding offsets at or past ``recovery_point`` is re-validated
        batch by batch (framing, CRC, offsets continuing, epochs never going back), and the
        segments below it are opened as after a clean shutdown. Either way a segment that does
        not check out (index entries past its end, a size that is not where its last batch
        ends, offsets that do not continue, a bad tail) is re-validated in full, and wherever
        a segment is cut, or the next one does not start where it ends, the log ends there:
        every later segment (with its indexes) is deleted, and leader-epoch entries at or past
        the new end are dropped. Bytes opened without their CRCs are checked when first read.
        ``recovery_report`` says what was done.
        ``open_segments`` is the LRU of rolled segments' descriptors to share (a new one with the
        default capacity if None). ``track_producers`` False (the metadata quorum's log, which
        no producer writes) keeps no producer state and writes no ``.snapshot`` files.
        """
        directory.mkdir(parents=True, exist_ok=True)
        parse_dir_name(directory.name)
        report = RecoveryReport(clean_shutdown=clean_shutdown)
        try:
            log = cls(directory, config, time_ms, open_segments)
            log.track_producers = track_producers
        except CheckpointError:
            # A damaged epoch file is rebuilt from the epochs stamped on the batches.
            (directory / EPOCH_FILE_NAME).unlink()
            log = cls(directory, config, time_ms, open_segments)
            log.track_producers = track_producers
            report.epoch_file_rebuilt = True
        log.recovery_report = report
        try:
            log._load(recovery_point, log_start_offset, clean_shutdown)
        except BaseException:
            log.close()
            raise
        return log

    def _remove_leftovers(self) -> list[int]:
        """Delete temp files and index files without a segment; return the segment bases."""
        bases = []
        for p in self.directory.iterdir():
            if p.name.endswith(TMP_SUFFIX):
                p.unlink()
            elif p.suffix == LOG_SUFFIX and p.stem.isdigit() and p.stem.isascii():
                bases.append(int(p.stem))
        for p in self.directory.iterdir():
            if p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and p.stem.isdigit() and \
                    p.stem.isascii() and \
                    int(p.stem) not in bases:
                p.unlink()
        return sorted(bases)

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        report = self.recovery_report
        now = self.time_ms()
        interval = self.config.index_interval_bytes
        # Opened lazily: a segment's .log is opened (through the LRU) when loading reads it.
        self.segments = [Segment(self.directory, b, now_ms=now, open_segments=self.open_segments)
                         for b in self._remove_leftovers()]
        if not self.segments:
            self.segments.append(self._new_segment(max(log_start_offset, 0)))
            self._dir_dirty = True
        epoch_starts: list[tuple[int, int]] = []
        report.recovery_point = recovery_point
        prev_epoch = -1
        for i, seg in enumerate(self.segments):
            following = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            validate = not clean_shutdown and (following is None or following > recovery_point)
            error = None
            if validate or not seg.load(now, interval, verify_tail=following is None):
                found = seg.recover(now, interval, min_epoch=prev_epoch)
                report.batches_checked += found.batches_checked
                report.bytes_truncated += found.bytes_truncated
                report.segments_checked += 1
                epoch_starts += found.epoch_starts
                if not validate:
                    report.indexes_rebuilt += 1  # it did not check out on the trusted path
                if found.bytes_truncated:
                    error = found.error
            prev_epoch = max(prev_epoch, seg.last_epoch)
            if error is None and following is not None and following != seg.next_offset:
                error = (f"the next segment starts at offset {following}, not at "
                         f"{seg.next_offset}")
            if error is not None:
                report.truncated_to = seg.next_offset
                report.reason = f"{seg.log_path.name}: {error}"
            if error is not None and following is not None:
                # The log ends inside (or right after) this segment: later segments lie past
                # an invalid batch or a hole in the offsets, and are never served.
                for later in self.segments[i + 1:]:
                    report.bytes_truncated += later.size
                    report.segments_deleted += 1
                    later.delete()
                del self.segments[i + 1:]
                self._dir_dirty = True
                break
        self.active.activate()
        leo = self.log_end_offset
        epochs = self.leader_epochs
        # An entry starting exactly at the log end is an epoch that began with no message yet
        # (a leader elected, then stopped): it is kept unless recovery cut the log there. Only
        # entries past the end (written before batches a crash lost) or at a cut are dropped.
        end = leo if report.truncated_to >= 0 else leo + 1
        report.epoch_entries_dropped = epochs.truncate_from_end(end)
        if report.epoch_file_rebuilt:
            epoch_starts = self._epoch_starts_from_batches()
        for epoch, start in epoch_starts:
            # Fills in an epoch start the file lacks; the file is written before the batches,
            # so normally this adds nothing.
            if 0 <= epoch and epoch > epochs.latest_epoch and start < leo:
                epochs.assign(epoch, start)
                report.epoch_entries_added += 1
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset), leo)
        epochs.truncate_from_start(self.log_start_offset)
        self.recovery_point = leo if clean_shutdown else min(max(recovery_point, 0), leo)
        self._hw = self.log_start_offset
        self._rebuild_producer_state()

    # -- producer state --------------------------------------------------------------------------

    def _rebuild_producer_state(self) -> None:
        """Rebuild the producer state as of the log end: from the newest snapshot at or below
        it that passes its checks, then the batches after it. Snapshots past the end (their
        batches were cut) and unusable ones are deleted."""
        if not self.track_producers:
            return
        report = self.recovery_report
        leo = self.log_end_offset
        state = ProducerStateManager(self.producer_state.max_producers)
        start = self.segments[0].base_offset
        for offset in reversed(snapshot_offsets(self.directory)):
            path = producer_snapshot.snapshot_path(self.directory, offset)
            if offset > leo:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = producer_snapshot.decode(path.read_bytes(), offset,
                                                   state.max_producers)
            except (SnapshotError, OSError) as e:
                report.snapshots_ignored += 1
                report.snapshot_problem = f"{path.name}: {e}"
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                state.restore(entry)
            start = max(start, offset)
            break
        for seg in self.segments:
            if seg.next_offset <= start:
                continue
            position = seg.locate(start) if start > seg.base_offset else 0
            for _pos, info in seg.batches(position):
                if info.base_offset >= start:
                    state.update(info)
                    report.producer_batches_replayed += 1
        self.producer_state = state

    def write_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end (at a roll and a clean close), keeping
        the two newest snapshots. Written with no producer known too (a few bytes): without
        it a start would replay the whole log to find out there is none."""
        if not self.track_producers:
            return
        producer_snapshot.write(self.directory, self.producer_state, self.log_end_offset)
        for offset in snapshot_offsets(self.directory)[:-2]:
            producer_snapshot.snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``expiration_ms`` (``producer.id.expiration.ms``)."""
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    def _epoch_starts_from_batches(self) -> list[tuple[int, int]]:
        starts: list[tuple[int, int]] = []
        epoch = None
        for seg in self.segments:
            for _pos, info in seg.batches():
                if info.partition_leader_epoch != epoch:
                    epoch = info.partition_leader_epoch
                    starts.append((epoch, info.base_offset))
        return starts

    # -- offsets ---------------------------------------------------------------------------------

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

    @property
    def unflushed_messages(self) -> int:
        return max(0, self._appended_messages - self._flushed_messages)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append, roll check, retention run or flush check."""
        self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log {self.directory.name} is closed")

    # -- appending -------------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | memoryview, leader_epoch: int) -> AppendResult:
        """Validate a produced record set, stamp offsets from the log end and ``leader_epoch``,
        and append it (rolling first if the active segment is full or old).

        Every record of every batch is parsed first (:mod:`broker_core.log.validator`),
        a compressed batch decompressed to at most ``max.message.bytes``; then the topic's
        timestamp bounds (``message.timestamp.before.max.ms``, ``.after.max.ms``,
        ``.difference.max.ms``) are checked, a batch with a producer id is
        checked against the producer state (a retry of a batch the log holds is answered with
        that batch's offsets, ``duplicate=True``, and nothing appended), and
        ``message.timestamp.type`` and ``compression.type`` are applied
        (:mod:`broker_core.log.leader_rewrite`).

        Raises :class:`~broker_core.wire.records.InvalidRecordBatch` subclasses for bad
        batches or records and :class:`RecordTooLarge`; on any error nothing is appended.
        """
        self._check_open()
        buf, infos = assign_offsets(records, self.log_end_offset, leader_epoch)
        limit = self.config.max_message_bytes
        for info in infos:
            if info.size > limit:
                raise RecordTooLarge(info.size, limit)
        validate_records(buf, infos, max_decompressed_bytes=limit)
        if self.config.message_timestamp_type == "CreateTime":
            # Stored with the topic's timestamp type, as Kafka does, before the bounds look
            # at the records' timestamps.
            buf, infos = as_create_time(buf, infos, max_batch_bytes=limit)
        now_ms = self.time_ms()
        check_timestamps(buf, infos, timestamp_type=self.config.message_timestamp_type,
                         before_max_ms=self.config.message_timestamp_before_max_ms,
                         after_max_ms=self.config.message_timestamp_after_max_ms,
                         max_difference_ms=self.config.message_timestamp_difference_max_ms,
                         now_ms=now_ms, max_batch_bytes=limit)
        # A retry of a batch the log holds is answered before any rewrite work: nothing is
        # appended (the rewrite keeps producer ids and sequences, so the checks see the same).
        duplicate = self._check_producers(infos)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, 0, 0, 0, -1,
                                duplicate=True)
        buf, infos = rewrite_for_topic(
            buf, infos, compression_type=self.config.compression_type,
            timestamp_type=self.config.message_timestamp_type, now_ms=now_ms,
            max_batch_bytes=limit)
        if leader_epoch > self.leader_epochs.latest_epoch:
            # Record where this leader generation begins before its first batch.
            self.leader_epochs.assign(leader_epoch, infos[0].base_offset)
        return self._append(buf, infos)

    def _check_producers(self, infos: list[BatchInfo]) -> BatchMetadata | None:
        """The producer-state checks of a produced record set: the original batch when it
        is a retry of one the log holds; :class:`ProducerStateError` when refused."""
        if not any(info.producer_id >= 0 or info.is_transactional for info in infos):
            return None
        if len(infos) > 1:
            # Clients send one batch per partition; several would need their duplicates
            # answered one by one, which a ProduceResponse cannot say.
            raise ProducerStateError("INVALID_RECORD", f"{len(infos)} batches with a producer "
                                     "id in one partition's records; send one")
        return self.producer_state.check(infos[0])

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        The batches must be valid (CRC included) and continue the log exactly at its end
        offset (:class:`UnexpectedAppendOffset` otherwise). A trailing partial batch is ignored,
        as a fetch response may end with one. Epoch entries follow the batches' epochs.
        """
        self._check_open()
        view = memoryview(records)
        data = bytes(view[:whole_batches_length(view)])
        leo = self.log_end_offset
        if not data:
            return AppendResult(leo, leo - 1, 0, 0, 0, -1)
        infos = list(iter_batches(data))
        expected = leo
        for info in infos:
            if info.base_offset != expected:
                raise UnexpectedAppendOffset(info.base_offset, expected)
            expected = info.last_offset + 1
        for info in infos:
            if info.partition_leader_epoch >= 0:
                self.leader_epochs.assign(info.partition_leader_epoch, info.base_offset)
        return self._append(data, infos)

    def _append(self, data: bytes | bytearray, infos: list[BatchInfo]) -> AppendResult:
        if self._should_roll(len(data), infos[-1].last_offset):
            self._roll()
        self.active.append(data, infos, now_ms=self.time_ms(),
                           index_interval_bytes=self.config.index_interval_bytes)
        for info in infos:
            self.producer_state.update(info)
        count = sum(i.record_count for i in infos)
        self._appended_messages += count
        return AppendResult(infos[0].base_offset, infos[-1].last_offset, count, len(infos),
                            len(data), max(i.max_timestamp for i in infos))

    def _should_roll(self, incoming: int, last_offset: int) -> bool:
        seg = self.active
        if seg.size == 0:
            return False
        cfg = self.config
        return (seg.size + incoming > cfg.segment_bytes
                or self._too_old(seg)
                or len(seg.index) >= cfg.max_index_entries
                # index entries hold offsets relative to the segment base as int32
                or last_offset - seg.base_offset > INT32_MAX)

    def _too_old(self, seg: Segment) -> bool:
        return seg.roll_base_ms is not None and \
            self.time_ms() - seg.roll_base_ms >= self.config.segment_ms

    def _new_segment(self, base_offset: int) -> Segment:
        return Segment.create(self.directory, base_offset, now_ms=self.time_ms(),
                              open_segments=self.open_segments)

    def _roll(self) -> None:
        old = self.active
        # The old segment's index files get their last entries first; if that fails nothing
        # has changed and the append fails.
        old.persist_indexes()
        # The state as of the new segment's base: a start replays from here, not the whole log.
        self.write_producer_snapshot()
        new = self._new_segment(self.log_end_offset)
        with self._lock:
            self.segments.append(new)
            self._dir_dirty = True
        old.deactivate()

    def maybe_roll(self) -> bool:
        """Roll the active segment if it is older than ``segment.ms`` (the broker calls this on a
        timer, so an idle partition still rolls). Empty segments never roll."""
        self._check_open()
        if self.active.size > 0 and self._too_old(self.active):
            self._roll()
            return True
        return False

    # -- reading ---------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
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
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` — but at
        least one batch when ``min_one`` (KIP-74) — stopping before any batch whose last offset
        is >= ``max_offset`` (the high watermark, for consumers).

        ``offset == log_end_offset`` gives an empty result; an offset outside
        ``[log_start_offset, log_end_offset]`` raises :class:`OffsetOutOfRange`. Each segment
        touched is read once; records are never looked at. A batch that fails its checks
        (only bytes trusted at open are checked, once) raises :class:`CorruptLogError`.
        """
        self._check_open()
        leo = self.log_end_offset
        start = self.log_start_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRange(offset, start, leo)
        if offset == leo or (max_offset is not None and offset >= max_offset):
            return ReadResult(b"", start, leo)
        chunks: list[bytes] = []
        budget = max_bytes
        need_one = min_one
        for seg in self.segments[self._segment_index(offset):]:
            if offset >= seg.next_offset:
                continue
            offset = max(offset, seg.base_offset)
            try:
                data, exhausted = seg.read(offset, budget, max_offset, need_one)
            except CorruptBatch as e:
                raise CorruptLogError(self.topic, self.partition, e.offset,
                                      f"{e.reason} (byte {e.position} of {e.segment})") from None
            if data:
                chunks.append(data)
                budget -= len(data)
                need_one = False
            if not exhausted or budget <= 0:
                break
            offset = seg.next_offset
        records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return ReadResult(records, start, leo)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start whose timestamp
        is >= ``timestamp_ms`` (ListOffsets by time), or None."""
        self._check_open()
        for seg in self.segments:
            if seg.next_offset <= self.log_start_offset:
                continue
            found = seg.find_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return found
        return None

    def offset_for_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest timestamp in the log
        (ListOffsets MAX_TIMESTAMP, KIP-734), or None for an empty log."""
        self._check_open()
        best: Segment | None = None
        for seg in self.segments:
            if seg.next_offset > self.log_start_offset and seg.size and \
                    (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None or best.max_timestamp < 0:
            return None
        return best.max_timestamp_record(self.log_start_offset)

    # -- truncation and retention ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset``; a batch containing ``offset`` goes whole, so
        the new log end may be below ``offset``. Epoch entries at or past the new end go too.
        Below the log start this is :meth:`truncate_fully_and_start_at` (as in Kafka)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        if offset >= self.log_end_offset:
            return
        with self._lock:
            doomed = [s for s in self.segments[1:] if s.base_offset >= offset]
            if doomed:
                self.segments = self.segments[:len(self.segments) - len(doomed)]
                self._dir_dirty = True
            self._truncations += 1
        for seg in doomed:
            seg.delete()
        self.active.activate()  # a rolled segment may be the last one again
        self.active.truncate_to(offset)
        leo = self.log_end_offset
        self.leader_epochs.truncate_from_end(leo)
        self._hw = min(self._hw, leo)
        with self._lock:
            self.recovery_point = min(self.recovery_point, leo)
        # The cut batches' producers must not be remembered: rebuilt from before the cut.
        self._rebuild_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and continue at ``offset`` (a follower far behind the leader's log
        start). The epoch file is cleared."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            # All under the lock: the segment list is never empty to a flush thread.
            for seg in self.segments:
                seg.delete()
            self.segments = [self._new_segment(offset)]
            self.recovery_point = offset
            self._truncations += 1
            self._dir_dirty = True
        self.log_start_offset = offset
        self._hw = offset
        self.leader_epochs.clear()
        for old in snapshot_offsets(self.directory):
            producer_snapshot.snapshot_path(self.directory, old).unlink(missing_ok=True)
        self.producer_state.clear()

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start up to ``offset`` (DeleteRecords, KIP-107, on the leader; a
        follower copying its leader's log start). Never down, never past the high watermark
        (:class:`OffsetOutOfRange`): a record not yet committed cannot be deleted. Reads below
        the new start are refused at once; the segments wholly below it go at the next
        :meth:`delete_old_segments`. Returns whether the start moved."""
        self._check_open()
        if offset > self._hw or offset < 0:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._hw)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.leader_epochs.truncate_from_start(offset)
        return True

    def delete_old_segments(self) -> int:
        """Retention: delete the oldest segments while they are past ``retention.ms`` (by their
        largest timestamp), while the log stays at least ``retention.bytes`` without them, or
        while they lie wholly below the log start. Never deletes a batch at or above the high
        watermark; the active segment is rolled first if it has to go. Moves the log start and
        trims the epoch file. Returns the number of segments deleted."""
        self._check_open()
        now = self.time_ms()
        cfg = self.config
        total = self.size_bytes
        doomed: list[Segment] = []
        last = len(self.segments) - 1
        for i, seg in enumerate(self.segments):
            if seg.size == 0 or seg.next_offset > self._hw:
                break
            below_start = i < last and self.segments[i + 1].base_offset <= self.log_start_offset
            ts = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms
            expired = cfg.retention_ms >= 0 and now - ts > cfg.retention_ms
            oversize = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (below_start or expired or oversize):
                break
            doomed.append(seg)
            total -= seg.size
        if not doomed:
            return 0
        if doomed[-1] is self.active:
            self._roll()
        with self._lock:
            self.segments = self.segments[len(doomed):]
            self._dir_dirty = True
        for seg in doomed:
            seg.delete()
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._hw = max(self._hw, self.log_start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        return len(doomed)

    # -- durability ------------------------------------------------------------------------------

    def should_flush(self) -> bool:
        """True when ``flush.messages`` unflushed records have piled up or ``flush.ms`` passed
        since the last flush with something unflushed."""
        unflushed = self.unflushed_messages
        if unflushed <= 0:
            return False
        cfg = self.config
        if cfg.flush_messages is not None and unflushed >= cfg.flush_messages:
            return True
        return cfg.flush_ms is not None and self.time_ms() - self.last_flush_ms >= cfg.flush_ms

    def flush(self, up_to: int | None = None) -> None:
        """Write out the pending index entries and fsync the segments (data and indexes) holding
        offsets from the recovery point up to ``up_to`` (default: the log end), and the
        directory if segments were created or deleted, then advance the recovery point.

        BLOCKING: the broker calls this from an IO thread while the reactor keeps appending.
        The log's lock is held only to snapshot the segments and to publish the result; each
        segment hands out its descriptors under its own lock (:meth:`Segment.sync_fds`:
        duplicated or freshly opened, so a segment closed, evicted or deleted meanwhile is
        harmless). A truncation during the fsync keeps the recovery point where it was, as the
        flushed bytes may no longer be the log's; so does a close of the log, as a segment
        closed before its descriptors were taken was not synced. The epoch file is fsynced first
        when it changed, so the flushed segments never hold batches of an epoch the durable
        epoch file does not know.
        """
        self.leader_epochs.sync()
        with self._lock:
            if self._closed:
                return
            leo = self.segments[-1].next_offset
            target = leo if up_to is None else min(up_to, leo)
            rp = self.recovery_point
            generation = self._truncations
            appended = self._appended_messages
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            todo = [seg for seg in self.segments
                    if seg.next_offset > rp and seg.base_offset < target]
        fds: list[int] = []
        skipped = False
        try:
            for seg in todo:
                got = seg.sync_fds()
                if got is None:
                    skipped = True  # deleted (or the log closed) since the snapshot
                else:
                    fds.extend(got)
        except OSError:
            for fd in fds:
                os.close(fd)
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        try:
            for fd in fds:
                os.fsync(fd)
            if dir_dirty:
                fsync_dir(self.directory)
        except OSError:
            if self._closed:
                return  # deleted under us: nothing left to make durable
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if self._truncations == generation and not (skipped and self._closed):
                self.recovery_point = max(self.recovery_point, min(target,
                                                                   self.log_end_offset))
            self._flushed_messages = max(self._flushed_messages, appended)
            self.last_flush_ms = self.time_ms()

    def close(self) -> None:
        """Close every file (idempotent). Does not flush (no fsync), but writes the index
        entries the files lack, so the next start loads them instead of rebuilding, and a
        producer-state snapshot at the log end, so it replays nothing."""
        if not self._closed:
            try:
                self.write_producer_snapshot()
            except OSError:
                pass  # the next start rebuilds the state from the log
        self._close(persist=True)

    def abandon(self) -> None:
        """Close every descriptor and write nothing (not even a pending leader-epoch change):
        the log's directory is offline after an I/O error (idempotent)."""
        self._close(persist=False)

    def _close(self, *, persist: bool) -> None:
        # A clean close writes an epoch change still waiting for its write-behind job; a delete
        # drops it, so a late job cannot write into the doomed (or a re-created) directory.
        # A failed write is left to the flush before a clean-shutdown marker (which writes and
        # fsyncs the file) or to recovery, which rebuilds the entries from the batches.
        try:
            self.leader_epochs.close(write=persist)
        except OSError:
            pass
        with self._lock:
            self._closed = True
            for seg in self.segments:
                seg.close(persist=persist)

    def delete(self) -> None:
        """Close and remove the partition directory: renamed to ``<dir>.<id>-delete`` first, so a
        crash half-way leaves a name that the manager cleans up, never a half-deleted log."""
        self._close(persist=False)
        doomed = self.directory.with_name(
            f"{self.directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            os.replace(self.directory, doomed)
            fsync_dir(self.directory.parent)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.directory.name}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, hw={self._hw}, segments={len(self.segments)})")
