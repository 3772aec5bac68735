"""The metadata log on disk: :class:`DiskRaftLog`, an :class:`IRaftLog` over the broker's own
partition log (:mod:`broker_core.log`).

Layout. The metadata log is an ordinary partition directory, ``__cluster_metadata-0`` under the
data directory it is given: segments (``<base offset>.log`` with ``.index`` and ``.timeindex``)
and ``leader-epoch-checkpoint``, exactly as any topic partition. Each entry is one RecordBatch
v2 (:mod:`broker_core.raft.records`): ``baseOffset`` = the entry's offset,
``partitionLeaderEpoch`` = its epoch, control entries as control batches. Because every entry is
its own batch, the log layer's whole-batch truncation truncates at exactly the offset asked for.

Epochs. The leader-epoch file is the epoch cache: the log layer records ``(epoch, start
offset)`` when a batch of a new epoch is appended and drops entries past the end on truncation,
so :meth:`DiskRaftLog.end_offset_for_epoch`, :meth:`~DiskRaftLog.epoch_at` and
:meth:`~DiskRaftLog.last_epoch` are answered from it without reading a segment.

Durability and recovery. :meth:`DiskRaftLog.flush` fsyncs the epoch file, then the segments and
their indexes, then the directory when files came or went (:meth:`Log.flush`). A clean
:meth:`~DiskRaftLog.close` flushes and then leaves a ``.clean-shutdown`` marker in the partition
directory; opening removes it (durably) before anything else happens. Without the marker the
open is unclean and every segment is re-validated batch by batch (CRC included): the first torn
or corrupt batch and everything after it is cut, and the epoch file is trimmed to the new end
and completed from the batches' epochs. What comes back is the durable prefix of what was
appended, with its epochs.

Log start. After a snapshot the prefix below it may go (:meth:`DiskRaftLog.delete_prefix`):
the new start and the epoch of the entry just below it go to ``raft-log-start`` first
(atomically and durably, Kafka's checkpoint text format: ``start epoch``), then the log start
moves, the epoch file is trimmed and the segments wholly below the start are deleted. A crash
in between leaves the file ahead of the segments, and the next open deletes them. Reads below
the start raise :class:`~broker_core.raft.log.OffsetBelowLogStart`. :meth:`DiskRaftLog.reset`
(a snapshot installed from the leader) writes the file, then deletes every segment and starts
an empty log at the snapshot's end; the node checks the log against its latest snapshot at
start and resets again if a crash came between the two.

Threading. One thread (the driver's) calls every method. :meth:`~DiskRaftLog.flush` blocks on
fsync; the driver may run it on another thread but never at the same time as an
:meth:`~DiskRaftLog.append` or :meth:`~DiskRaftLog.truncate_to` (the Raft core asks for a flush
of exactly what it appended before anything that depends on it is sent, so there is nothing to
gain from overlapping them).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from pathlib import Path

from zope.interface import implementer

from broker_core.log.checkpoints import (
    CheckpointError,
    format_lines,
    fsync_dir,
    parse_ints,
    parse_lines,
    write_atomically,
)
from broker_core.log.config import LogConfig
from broker_core.log.log import Log
from broker_core.log.manager import CLEAN_SHUTDOWN
from broker_core.log.partition_dir import partition_dir_name
from broker_core.log.recovery import RecoveryReport
from broker_core.raft.entries import LogEntry
from broker_core.raft.log import IRaftLog, OffsetBelowLogStart, check_appendable, epoch_starts_from
from broker_core.raft.records import batch_entries, entries_to_records
from broker_core.raft.wire import METADATA_PARTITION, METADATA_TOPIC
from broker_core.wire.records import batch_size_at, iter_batches, parse_batch

#: The metadata log's directory under a data directory.
DIR_NAME = partition_dir_name(METADATA_TOPIC, METADATA_PARTITION)

#: The log start offset and the epoch below it, next to the segments.
START_FILE = "raft-log-start"

#: The first read's byte budget when the log holds nothing yet to estimate entry sizes from.
_MIN_READ_BYTES = 4096


@implementer(IRaftLog)
class DiskRaftLog:
    """:class:`IRaftLog` over a :class:`~broker_core.log.log.Log` (see the module docstring).
    Build one with :meth:`open`.

    Invariant: the log's batches are exactly one per entry, at dense offsets from 0 with
    non-decreasing epochs >= 1, and its epoch file lists the start of every epoch present.
    """

    def __init__(self, log: Log, start_epoch: int = 0) -> None:
        self._log = log
        self._start_epoch = start_epoch  # the epoch of the entry at start_offset() - 1
        self._closed = False

    @classmethod
    def open(cls, data_dir: Path, *, time_ms: Callable[[], int],
             config: LogConfig | None = None) -> DiskRaftLog:
        """Open (or create) the metadata log under ``data_dir``.

        ``time_ms`` is the clock the log layer stamps segments with (``segment.ms`` rolls);
        ``config`` its settings (defaults: :class:`LogConfig`'s; retention never runs here).
        A missing clean-shutdown marker means recovery (see the module docstring); what it
        repaired is in :attr:`recovery_report`.
        """
        directory = Path(data_dir) / DIR_NAME
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / CLEAN_SHUTDOWN
        clean = marker.exists() or not any(directory.iterdir())
        start, start_epoch = _read_start(directory / START_FILE)
        log = Log.open(directory, config or LogConfig(), time_ms=time_ms, recovery_point=0,
                       clean_shutdown=clean, log_start_offset=start, track_producers=False)
        try:
            if log.log_start_offset != start:
                # A reset that crashed before its segments went: the node resets again from
                # its snapshot; until then the epoch below this start is unknown.
                start_epoch = 0
            else:
                log.delete_old_segments()  # a prefix deletion that crashed half-way
            if marker.exists():
                # Gone (durably) before the first append: a crash from here on is unclean.
                marker.unlink()
                fsync_dir(directory)
        except BaseException:
            log.close()
            raise
        return cls(log, start_epoch)

    @property
    def log(self) -> Log:
        """The partition log underneath (for tools, metrics and tests)."""
        return self._log

    @property
    def directory(self) -> Path:
        return self._log.directory

    @property
    def recovery_report(self) -> RecoveryReport:
        """What opening the log found and repaired."""
        return self._log.recovery_report

    # -- IRaftLog ----------------------------------------------------------------------------------

    def start_offset(self) -> int:
        return self._log.log_start_offset

    def end_offset(self) -> int:
        return self._log.log_end_offset

    def last_epoch(self) -> int:
        latest = self._log.leader_epochs.latest_entry
        return self._start_epoch if latest is None else latest.epoch

    def epoch_at(self, offset: int) -> int:
        if offset == -1:
            return 0
        start = self._log.log_start_offset
        if offset == start - 1:
            return self._start_epoch
        if offset < start:
            raise OffsetBelowLogStart(offset, start)
        if not 0 <= offset < self._log.log_end_offset:
            raise IndexError(f"offset {offset} is outside the log [0, "
                             f"{self._log.log_end_offset})")
        starts = self._log.leader_epochs.entries
        i = bisect.bisect_right([e.start_offset for e in starts], offset)
        return starts[i - 1].epoch

    def append(self, entries: Sequence[LogEntry]) -> None:
        check_appendable(entries, self._log.log_end_offset, self.last_epoch())
        if entries:
            # The follower path keeps the batches' offsets and epochs and records each new
            # epoch's start in the epoch file before the batches are written.
            self._log.append_as_follower(entries_to_records(entries))

    def read(self, start_offset: int, max_entries: int) -> tuple[LogEntry, ...]:
        if start_offset < self._log.log_start_offset and start_offset >= 0:
            raise OffsetBelowLogStart(start_offset, self._log.log_start_offset)
        data = self.read_records(start_offset, max_entries)
        out: list[LogEntry] = []
        # Every batch was validated (CRC included) when it was appended or recovered.
        for info in iter_batches(data, verify_crc=False):
            out.extend(batch_entries(data, info))
        return tuple(out)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        starts = [(e.epoch, e.start_offset) for e in self._log.leader_epochs.entries]
        start = self._log.log_start_offset
        if start:
            # The epoch file covers the entries held; the epoch below the start ends there.
            starts = epoch_starts_from(start, self._start_epoch, starts)
        i = bisect.bisect_right([e for e, _ in starts], epoch)
        if i == 0:
            return (0, 0)
        end = starts[i][1] if i < len(starts) else self._log.log_end_offset
        return (starts[i - 1][0], end)

    def truncate_to(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        if offset < self._log.log_start_offset:
            raise OffsetBelowLogStart(offset, self._log.log_start_offset)
        if offset >= self._log.log_end_offset:
            return
        self._log.truncate_to(offset)

    def delete_prefix(self, offset: int) -> None:
        """Drop the entries below ``offset``: ``raft-log-start`` first (durably), then the
        log start moves and the segments wholly below it are deleted (see the module
        docstring). BLOCKING (one atomic file write)."""
        log = self._log
        if offset <= log.log_start_offset:
            return
        if offset > log.log_end_offset:
            raise ValueError(f"cannot delete below {offset}: the log ends at "
                             f"{log.log_end_offset}")
        start_epoch = self.epoch_at(offset - 1)
        _write_start(log.directory / START_FILE, offset, start_epoch)
        self._start_epoch = start_epoch
        log.log_start_offset = offset
        log.high_watermark = offset  # the log layer deletes segments only below its hw
        log.leader_epochs.truncate_from_start(offset)
        log.delete_old_segments()

    def reset(self, offset: int, epoch: int) -> None:
        """Start again, empty, at ``offset`` with ``epoch`` below it (a snapshot ending there
        was installed). BLOCKING."""
        if offset < 0 or epoch < 0:
            raise ValueError(f"cannot start a log at ({offset}, {epoch})")
        _write_start(self._log.directory / START_FILE, offset, epoch)
        self._start_epoch = epoch
        self._log.truncate_fully_and_start_at(offset)
        self._log.flush()

    def flush(self) -> None:
        """fsync everything appended so far (epoch file, segments, indexes, directory).
        BLOCKING; never concurrently with :meth:`append` or :meth:`truncate_to`."""
        self._log.flush()

    # -- raw batches ---------------------------------------------------------------------------

    def read_records(self, start_offset: int, max_entries: int,
                     max_bytes: int | None = None) -> bytes:
        """The stored batches of the entries ``[start_offset, start_offset + max_entries)``
        (fewer at the log end), as they lie on disk and without decoding them: what a leader
        puts in a fetch response. With ``max_bytes`` it stops before the batch that would pass
        that many bytes, but always returns at least one batch when there is one (KIP-74).
        ``records_to_entries`` of the result equals ``read(start_offset, max_entries)``."""
        if start_offset < 0:
            raise ValueError(f"negative read offset {start_offset}")
        log = self._log
        leo = log.log_end_offset
        stop = min(start_offset + max(max_entries, 0), leo)
        chunks: list[bytes] = []
        offset = start_offset
        left = max_bytes
        while offset < stop and (left is None or left > 0):
            # Enough bytes for the entries wanted at the log's average entry size; the log read
            # stops at ``stop`` anyway, and a short guess only costs another round.
            budget = max(_MIN_READ_BYTES, (stop - offset) * (log.size_bytes // max(leo, 1) + 1))
            if left is not None:
                budget = min(budget, left)
            # Without a byte limit every round returns at least one batch, so a batch larger
            # than the estimate never ends the read early.
            data = log.read(offset, budget, max_offset=stop,
                            min_one=left is None or not chunks).records
            if not data:
                break
            chunks.append(data)
            if left is not None:
                left -= len(data)
            offset = _last_offset(data) + 1
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, close the files and leave the clean-shutdown marker, so the next open trusts
        the files (idempotent). If the flush fails the marker is not written, the files are
        closed anyway, and the error is raised: the next open recovers."""
        if self._closed:
            return
        self._closed = True
        try:
            self._log.flush()
        except BaseException:
            self._log.close()
            raise
        self._log.close()
        write_atomically(self._log.directory / CLEAN_SHUTDOWN, "")

    def __repr__(self) -> str:
        return f"DiskRaftLog({self._log!r})"


def _write_start(path: Path, offset: int, epoch: int) -> None:
    write_atomically(path, format_lines([f"{offset} {epoch}"]), sync=True)


def _read_start(path: Path) -> tuple[int, int]:
    """``(start offset, epoch below it)`` from ``raft-log-start``; ``(0, 0)`` without one.
    A damaged file is a :class:`~broker_core.log.checkpoints.CheckpointError` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return (0, 0)
    lines = parse_lines(text, str(path))
    if len(lines) != 1:
        raise CheckpointError(f"{path}: expected one entry, found {len(lines)}")
    offset, epoch = parse_ints(lines[0], 2, str(path))
    return (offset, epoch)


def _last_offset(data: bytes) -> int:
    """The last offset of the last batch in ``data`` (whole batches, at least one)."""
    pos = 0
    last = 0
    while pos < len(data):
        last = pos
        size = batch_size_at(data, pos)
        assert size is not None
        pos += size
    return parse_batch(data, last, verify_crc=False).last_offset
