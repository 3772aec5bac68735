"""The leader-epoch file of a partition: the leader generation sequence file, Kafka's
``leader-epoch-checkpoint``.

Each entry says "leader epoch E started at offset O". The file is the checkpoint format of
:mod:`.checkpoints` with ``epoch start_offset`` lines, rewritten atomically (tmp, rename) after
every change and fsynced by the log's next flush (:meth:`LeaderEpochFile.sync`), not at once: a
controller that moves thousands of leaders at once would otherwise cost two fsyncs per partition
on the reactor thread. What a crash loses of it, recovery rebuilds from the batches' epochs.

A broker writes the file behind the change (:class:`WriteBehind`): the entries change in memory
on the reactor, and one job on an IO thread rewrites the files of every partition changed in
that reactor turn (a LeaderAndIsr naming thousands of partitions is one job, not thousands of
file replacements on the reactor; such a burst may be held a little longer, see
:class:`WriteBehind`). An entry may therefore exist only in memory for a moment.
That is safe because the file is never the only record of an epoch that has data: every batch
carries its leader epoch, :meth:`LeaderEpochFile.sync` (called by the log's flush *before* the
segments are fsynced) writes a pending change first, so flushed batches never outrun the
durable file, and recovery after an unclean stop re-reads the batches past the recovery point
and adds the epoch starts the file lacks (``Log._load``). An epoch that has no batch yet carries
no data to lose; its leader gets a new epoch when it comes back anyway.

The rules are Kafka's ``LeaderEpochFileCache``:

- :meth:`LeaderEpochFile.assign` adds an entry when the epoch differs from the latest one (or
  the latest epoch is re-assigned a smaller start offset), first removing every entry whose
  epoch or start offset is not below the new one — so epochs and start offsets always strictly
  increase;
- :meth:`LeaderEpochFile.end_offset_for_epoch` answers OffsetForLeaderEpoch (KIP-101/KIP-279);
- truncation at the end drops entries at or past the new log end; truncation at the start
  (retention) drops entries wholly before the new log start and moves the one covering it up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from broker_core.log.checkpoints import (
    CheckpointError,
    format_lines,
    fsync_file,
    parse_ints,
    parse_lines,
    write_atomically,
)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFile:
    """In-memory epoch entries mirrored to ``leader-epoch-checkpoint`` (see the module
    docstring). Invariant: ``entries`` strictly increase in both epoch and start offset, and the
    file always holds exactly ``entries``."""

    def __init__(self, directory: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = directory / FILE_NAME
        self._log_end_offset = log_end_offset
        self._entries: list[EpochEntry] = []
        # ``_lock`` guards the flags and the snapshot of the entries, never any file work, so the
        # reactor thread never waits for a disk there. ``_write_lock`` serializes the writers
        # (a write-behind job and a flush may run on two IO threads; they share the temp file).
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._dirty = False  # written since the last fsync
        self._unsaved = False  # the entries changed since the file was last written
        self._closed = False
        #: Called with this file instead of writing it at once when the entries change, on the
        #: thread that changed them (see :class:`WriteBehind`); None writes at once.
        self.write_behind: Callable[[LeaderEpochFile], Any] | None = None
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: not a text file") from None
        loaded = []
        for line in parse_lines(text, str(self.path)):
            epoch, offset = parse_ints(line, 2, str(self.path))
            if epoch < 0 or offset < 0 or (loaded and (epoch <= loaded[-1].epoch
                                                       or offset <= loaded[-1].start_offset)):
                raise CheckpointError(f"{self.path}: entry {line!r} is out of order or negative")
            loaded.append(EpochEntry(epoch, offset))
        self._entries = loaded

    def _save(self) -> None:
        with self._lock:
            self._unsaved = True
        if self.write_behind is None:
            self.write_pending()
        else:
            self.write_behind(self)

    def write_pending(self) -> None:
        """Write the file if the entries changed since it was last written (not fsynced:
        becoming leader of thousands of partitions at once would cost two fsyncs each; the log's
        flush fsyncs it first, see :meth:`sync`, and recovery after a crash rebuilds entries
        from the batches, which carry their epochs ("rebuild the potentially missing
        part"). BLOCKING; safe on an IO thread while the reactor changes the entries: it writes
        a snapshot, and a change made meanwhile marks the file unsaved again. A closed file
        (its log closed or deleted) is not written any more."""
        with self._write_lock:
            with self._lock:
                if not self._unsaved or self._closed:
                    return
                self._unsaved = False
                entries = list(self._entries)
            try:
                write_atomically(self.path, format_lines(f"{e} {o}" for e, o in entries),
                                 sync=False)
            except OSError:
                with self._lock:
                    self._unsaved = True
                raise
            with self._lock:
                self._dirty = True

    @property
    def unsaved(self) -> bool:
        """True while a change of the entries has not reached the file yet."""
        return self._unsaved

    def close(self, *, write: bool) -> None:
        """Stop writing the file: with ``write`` after writing a pending change (a clean close),
        without when the log is being deleted (a late write must not recreate its directory's
        file, or land in a new log of the same partition)."""
        try:
            if write:
                self.write_pending()
        finally:
            with self._write_lock, self._lock:
                self._closed = True

    def sync(self) -> None:
        """Write a pending change, then make the file durable if it changed since the last sync.
        BLOCKING (fsync); safe to call from an IO thread while the reactor thread changes the
        entries: the lock guards only the flags, never the fsync, so the reactor never waits for
        the disk here. A change made during the fsync sets the flag again and is synced next
        time."""
        self.write_pending()
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
        try:
            fsync_file(self.path)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile
        except OSError:
            with self._lock:
                self._dirty = True
            raise

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False if nothing changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} / start offset {start_offset} must not be "
                             "negative")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        self._entries = [e for e in self._entries
                         if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))
        self._save()
        return True

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` where ``end_offset`` is the start of the
        first epoch after the requested one, or the log end offset if it is the latest.

        - requested == latest epoch: ``(latest, log end offset)``;
        - between known epochs: ``(largest known epoch <= requested, start of the next)``;
        - below every known epoch: ``(requested, first start offset)``;
        - above the latest, undefined (-1) or no entries: ``(-1, -1)``.
        """
        if epoch == UNDEFINED or not self._entries:
            return (UNDEFINED, UNDEFINED)
        if epoch == self._entries[-1].epoch:
            return (epoch, self._log_end_offset())
        floor: EpochEntry | None = None
        for entry in self._entries:
            if entry.epoch > epoch:
                return (epoch if floor is None else floor.epoch, entry.start_offset)
            floor = entry
        return (UNDEFINED, UNDEFINED)  # newer than anything this replica has seen

    def truncate_from_end(self, end_offset: int) -> int:
        """The log now ends at ``end_offset``: drop entries starting at or after it; return how
        many were dropped."""
        keep = [e for e in self._entries if e.start_offset < end_offset]
        dropped = len(self._entries) - len(keep)
        if dropped:
            self._entries = keep
            self._save()
        return dropped

    def truncate_from_start(self, start_offset: int) -> int:
        """The log now starts at ``start_offset``: drop entries wholly before it and move the
        entry covering it up to ``start_offset``. Returns how many entries were dropped."""
        older = [e for e in self._entries if e.start_offset <= start_offset]
        if not older or (len(older) == 1 and older[0].start_offset == start_offset):
            return 0
        newer = self._entries[len(older):]
        self._entries = [EpochEntry(older[-1].epoch, start_offset), *newer]
        self._save()
        return len(older) - 1

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._save()


class WriteBehind:
    """Writes changed epoch files in batches on an IO thread (see the module docstring).

    Usage::

        writer = WriteBehind(reactor, lambda fn: deferToThreadPool(reactor, io_pool, fn))
        log.leader_epochs.write_behind = writer

    Invariant: every file handed to the writer is written by a job that starts after the
    change, once the current reactor turn is over (``clock.callLater(0, ...)``), so all files
    changed while handling one event go in one job. One job runs at a time; files changed while
    it runs go in the next one. ``run_blocking(fn)`` runs ``fn`` on an IO thread and returns a
    Deferred; a failure is handed to ``on_error`` (the file stays unsaved, so the log's next
    flush writes it).

    A burst (at least ``burst_files`` files waiting when the job would start: a LeaderAndIsr
    that moved thousands of leaderships) starts ``burst_delay_s`` later instead, with whatever
    else changed meanwhile. Its writes are many system calls, but the IO thread holds the GIL
    between them and so takes up to half of the reactor's time while it runs: just when the
    new leaders' first produce requests and their followers' fetches come in. Writing later
    is safe for the same reasons writing behind is (module docstring: the log's flush writes
    a pending change first, a clean close writes it, recovery rebuilds the rest from the
    batches).
    """

    def __init__(self, clock: Any, run_blocking: Callable[[Callable[[], None]], Any], *,
                 on_error: Callable[[Any], None] = lambda failure: None,
                 burst_files: int = 0, burst_delay_s: float = 0.0) -> None:
        self.clock = clock
        self.run_blocking = run_blocking
        self.on_error = on_error
        self.burst_files = burst_files
        self.burst_delay_s = burst_delay_s
        self._pending: dict[int, LeaderEpochFile] = {}
        self._scheduled: Any = None
        self._running = False
        self._held = False  # a burst is waiting out burst_delay_s

    def __call__(self, epoch_file: LeaderEpochFile) -> None:
        self._pending[id(epoch_file)] = epoch_file
        self._schedule()

    @property
    def pending(self) -> int:
        """Files waiting for the next job (for tests and metrics)."""
        return len(self._pending)

    def _schedule(self) -> None:
        if self._scheduled is None and not self._running and self._pending:
            self._scheduled = self.clock.callLater(0, self._start)

    def _start(self) -> None:
        self._scheduled = None
        if (self.burst_delay_s > 0 and not self._held
                and len(self._pending) >= max(1, self.burst_files)):
            self._held = True
            self._scheduled = self.clock.callLater(self.burst_delay_s, self._start)
            return
        self._held = False
        files = list(self._pending.values())
        self._pending.clear()
        self._running = True

        def write_all() -> None:
            error: BaseException | None = None
            for f in files:
                try:
                    f.write_pending()
                except OSError as e:
                    error = error or e
            if error is not None:
                raise error

        d = self.run_blocking(write_all)
        d.addErrback(self.on_error)
        d.addBoth(self._done)

    def _done(self, _: Any) -> None:
        self._running = False
        self._schedule()
