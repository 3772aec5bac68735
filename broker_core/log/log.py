"""One partition's log: an ordered list of segments, the leader-epoch file, and the offsets that
bound what may be read.

:class:`Log` is the facade: it owns the segment list, the offsets and the lock, and keeps the
invariants below; the jobs are done by modules of their own, which it calls with what they need:
recovery on open (:mod:`~broker_core.log.recovery`), the producer state across restarts
(:mod:`~broker_core.log.producer_recovery`), the checks and rewrites before an append
(:mod:`~broker_core.log.append_checks`), the read path (:mod:`~broker_core.log.reads`), when to
roll and what retention deletes (:mod:`~broker_core.log.segment_policy`); its errors are in
:mod:`~broker_core.log.errors` and directory names in :mod:`~broker_core.log.partition_dir`.
Only the log changes the segment list, and only under ``_lock``; the modules it calls either
decide (returning what to do) or work on the segments it hands them while nothing else runs.

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

import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_core.log.append_checks import follower_batches, leader_batches
from broker_core.log.checkpoints import CheckpointError, fsync_dir
from broker_core.log.config import LogConfig
from broker_core.log.errors import LogClosed, OffsetOutOfRange
from broker_core.log.leader_epoch import FILE_NAME as EPOCH_FILE_NAME
from broker_core.log.leader_epoch import LeaderEpochFile
from broker_core.log.open_segments import OpenSegments
from broker_core.log.partition_dir import DELETE_SUFFIX, parse_dir_name
from broker_core.log.producer_recovery import (
    delete_snapshots,
    rebuild_producer_state,
    write_snapshot,
)
from broker_core.log.producer_state import ProducerStateManager
from broker_core.log.reads import offset_for_max_timestamp, offset_for_timestamp, read_batches
from broker_core.log.recovery import (
    RecoveryReport,
    recover_segments,
    remove_leftovers,
    repair_epochs,
)
from broker_core.log.segment import Segment
from broker_core.log.segment_policy import expired_segments, should_roll, too_old
from broker_core.wire.records import BatchInfo


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

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        report = self.recovery_report
        now = self.time_ms()
        # Opened lazily: a segment's .log is opened (through the LRU) when loading reads it.
        # Built in place, so a failure part-way leaves the segments for close() to close.
        self.segments = [Segment(self.directory, b, now_ms=now, open_segments=self.open_segments)
                         for b in remove_leftovers(self.directory)]
        if not self.segments:
            self.segments.append(self._new_segment(max(log_start_offset, 0)))
            self._dir_dirty = True
        epoch_starts, deleted = recover_segments(
            self.segments, now_ms=now, index_interval_bytes=self.config.index_interval_bytes,
            recovery_point=recovery_point, clean_shutdown=clean_shutdown, report=report)
        self._dir_dirty = self._dir_dirty or deleted
        self.active.activate()
        leo = self.log_end_offset
        epochs = self.leader_epochs
        repair_epochs(epochs, self.segments, epoch_starts, report)
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset), leo)
        epochs.truncate_from_start(self.log_start_offset)
        self.recovery_point = leo if clean_shutdown else min(max(recovery_point, 0), leo)
        self._hw = self.log_start_offset
        self._rebuild_producer_state()

    # -- producer state --------------------------------------------------------------------------

    def _rebuild_producer_state(self) -> None:
        """Rebuild the producer state as of the log end
        (:func:`~broker_core.log.producer_recovery.rebuild_producer_state`)."""
        if not self.track_producers:
            return
        self.producer_state = rebuild_producer_state(
            self.directory, self.segments, self.producer_state.max_producers,
            self.recovery_report)

    def write_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end (at a roll and a clean close), keeping
        the two newest snapshots. Written with no producer known too (a few bytes): without
        it a start would replay the whole log to find out there is none."""
        if not self.track_producers:
            return
        write_snapshot(self.directory, self.producer_state, self.log_end_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``expiration_ms`` (``producer.id.expiration.ms``)."""
        return self.producer_state.remove_expired(now_ms, expiration_ms)

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
        buf, infos, duplicate = leader_batches(records, self.log_end_offset, leader_epoch,
                                               self.config, self.time_ms, self.producer_state)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, 0, 0, 0, -1,
                                duplicate=True)
        if leader_epoch > self.leader_epochs.latest_epoch:
            # Record where this leader generation begins before its first batch.
            self.leader_epochs.assign(leader_epoch, infos[0].base_offset)
        return self._append(buf, infos)

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        The batches must be valid (CRC included) and continue the log exactly at its end
        offset (:class:`UnexpectedAppendOffset` otherwise). A trailing partial batch is ignored,
        as a fetch response may end with one. Epoch entries follow the batches' epochs.
        """
        self._check_open()
        leo = self.log_end_offset
        data, infos = follower_batches(records, leo)
        if not data:
            return AppendResult(leo, leo - 1, 0, 0, 0, -1)
        for info in infos:
            if info.partition_leader_epoch >= 0:
                self.leader_epochs.assign(info.partition_leader_epoch, info.base_offset)
        return self._append(data, infos)

    def _append(self, data: bytes | bytearray, infos: list[BatchInfo]) -> AppendResult:
        if should_roll(self.active, len(data), infos[-1].last_offset, self.config, self.time_ms):
            self._roll()
        self.active.append(data, infos, now_ms=self.time_ms(),
                           index_interval_bytes=self.config.index_interval_bytes)
        for info in infos:
            self.producer_state.update(info)
        count = sum(i.record_count for i in infos)
        self._appended_messages += count
        return AppendResult(infos[0].base_offset, infos[-1].last_offset, count, len(infos),
                            len(data), max(i.max_timestamp for i in infos))

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
        if self.active.size > 0 and too_old(self.active, self.config, self.time_ms):
            self._roll()
            return True
        return False

    # -- reading ---------------------------------------------------------------------------------

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
        records = read_batches(self.segments, offset, max_bytes, max_offset=max_offset,
                               min_one=min_one, topic=self.topic, partition=self.partition)
        return ReadResult(records, start, leo)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start whose timestamp
        is >= ``timestamp_ms`` (ListOffsets by time), or None."""
        self._check_open()
        return offset_for_timestamp(self.segments, self.log_start_offset, timestamp_ms)

    def offset_for_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest timestamp in the log
        (ListOffsets MAX_TIMESTAMP, KIP-734), or None for an empty log."""
        self._check_open()
        return offset_for_max_timestamp(self.segments, self.log_start_offset)

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
        delete_snapshots(self.directory)
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
        doomed = expired_segments(self.segments, log_start_offset=self.log_start_offset,
                                  high_watermark=self._hw, config=self.config,
                                  now_ms=self.time_ms())
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
