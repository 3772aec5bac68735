"""The log the Raft core replicates: the :class:`IRaftLog` seam and an in-memory implementation.

The core needs only a handful of operations: append entries, read from an offset, truncate the
end, and answer "where does epoch E end in this log?" (docs/design.md#leader-epochs, the
question OffsetForLeaderEpoch and KIP-595's diverging-epoch check ask). The on-disk log
(:class:`broker_core.raft.storage.DiskRaftLog`) implements the same interface over
:mod:`broker_core.log` and its leader-epoch file; :class:`InMemoryRaftLog` serves the unit
tests and the simulation.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from zope.interface import Interface, implementer

from broker_core.raft.entries import LogEntry


class LogInvariantError(ValueError):
    """An append that would break the log's invariants (gaps, overlaps, decreasing epochs)."""


class OffsetBelowLogStart(LookupError):
    """A read or epoch lookup below the log start offset: those entries were deleted after a
    snapshot covered them (fetch the snapshot instead)."""

    def __init__(self, offset: int, start_offset: int) -> None:
        super().__init__(f"offset {offset} is below the log start offset {start_offset}: "
                         "those entries were deleted after a snapshot covered them")
        self.offset = offset
        self.start_offset = start_offset


class IRaftLog(Interface):
    """An append-only sequence of :class:`LogEntry` with dense offsets from
    :meth:`start_offset` (0 until a snapshot lets the prefix go), whose epochs never decrease.
    :meth:`truncate_to` removes entries from the end; :meth:`delete_prefix` and :meth:`reset`
    move the start, and the log remembers the epoch of the entry just below its start (the
    snapshot's), so ``epoch_at(start_offset() - 1)`` is still answered."""

    def start_offset():
        """The first offset the log holds (0 unless a prefix was deleted)."""

    def end_offset():
        """The offset the next entry will get (0 for an empty log)."""

    def last_epoch():
        """The epoch of the last entry; for an empty log the epoch below its start (0 for a
        log that never held anything)."""

    def epoch_at(offset):
        """The epoch of the entry at ``offset``; 0 for ``offset == -1`` (before the log); the
        remembered epoch for ``start_offset() - 1``; :class:`OffsetBelowLogStart` below that."""

    def delete_prefix(offset):
        """Drop every entry below ``offset`` (at most the end offset): the log now starts
        there. Durable when it returns (the start survives a restart). No-op at or below the
        current start."""

    def reset(offset, epoch):
        """Drop every entry and start again, empty, at ``offset``, with ``epoch`` as the epoch
        below it (a snapshot ending at ``offset`` was installed). Durable when it returns."""

    def append(entries):
        """Append ``entries`` (a sequence of LogEntry); the first must sit at ``end_offset()``,
        offsets must be dense and epochs non-decreasing, else LogInvariantError."""

    def read(start_offset, max_entries):
        """Up to ``max_entries`` entries from ``start_offset`` (a tuple, empty at the end);
        :class:`OffsetBelowLogStart` below the log start."""

    def end_offset_for_epoch(epoch):
        """``(e, end)``: ``e`` is the largest epoch in the log not above ``epoch`` and ``end``
        the offset where ``e`` ends (the start of the next epoch, or the log end offset); the
        epoch below the start counts, ending at the start offset at the latest. ``(0, 0)``
        when no entry has an epoch <= ``epoch`` (below the start: not known)."""

    def truncate_to(offset):
        """Remove every entry at or after ``offset`` (no-op if ``offset >= end_offset()``)."""

    def flush():
        """Make every appended entry durable. The core asks for a flush (``Effects.flush_log``)
        before any message that depends on the entries leaves the node."""


def check_appendable(entries: Sequence[LogEntry], end_offset: int, last_epoch: int) -> None:
    """Raise :class:`LogInvariantError` unless ``entries`` may follow a log that ends at
    ``end_offset`` with ``last_epoch``: dense offsets from ``end_offset``, epochs >= 1 and never
    decreasing. Every :class:`IRaftLog` checks an append with this before changing anything."""
    expected = end_offset
    for entry in entries:
        if entry.offset != expected:
            raise LogInvariantError(f"entry at offset {entry.offset} appended where offset "
                                    f"{expected} is next")
        if entry.epoch < last_epoch or entry.epoch < 1:
            raise LogInvariantError(f"entry at offset {entry.offset} has epoch {entry.epoch} "
                                    f"after epoch {last_epoch}")
        expected += 1
        last_epoch = entry.epoch


@implementer(IRaftLog)
class InMemoryRaftLog:
    """:class:`IRaftLog` in a list. Invariant: ``entries[i].offset == start + i``, epochs
    never decrease, and ``_epoch_starts`` lists ``(epoch, first offset)`` for every epoch
    present, in order (the leader-epoch cache, kept in step with the entries), preceded by
    ``(start epoch, start)`` when the prefix below ``start`` was deleted and the epoch below
    the start has no entry left."""

    def __init__(self, entries: Sequence[LogEntry] = ()) -> None:
        self._entries: list[LogEntry] = []
        self._start = 0
        self._start_epoch = 0  # the epoch of the entry at _start - 1 (0: none)
        self._epoch_starts: list[tuple[int, int]] = []
        self.flushes = 0  # test-only: how often the driver flushed
        self.append(entries)

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        """Test-only: every entry held, in order (from the start offset)."""
        return tuple(self._entries)

    def start_offset(self) -> int:
        return self._start

    def end_offset(self) -> int:
        return self._start + len(self._entries)

    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._start_epoch

    def epoch_at(self, offset: int) -> int:
        if offset == -1:
            return 0
        if offset == self._start - 1:
            return self._start_epoch
        if offset < self._start:
            raise OffsetBelowLogStart(offset, self._start)
        return self._entries[offset - self._start].epoch

    def append(self, entries: Sequence[LogEntry]) -> None:
        check_appendable(entries, self.end_offset(), self.last_epoch())
        for entry in entries:
            if not self._epoch_starts or self._epoch_starts[-1][0] != entry.epoch:
                self._epoch_starts.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def read(self, start_offset: int, max_entries: int) -> tuple[LogEntry, ...]:
        if start_offset < 0:
            raise ValueError(f"negative read offset {start_offset}")
        if start_offset < self._start:
            raise OffsetBelowLogStart(start_offset, self._start)
        i = start_offset - self._start
        return tuple(self._entries[i:i + max_entries])

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        # Index of the first epoch start above ``epoch``; the one before it is the floor.
        i = bisect.bisect_right(self._epoch_starts, (epoch, float("inf")))
        if i == 0:
            return (0, 0)
        floor_epoch = self._epoch_starts[i - 1][0]
        end = self._epoch_starts[i][1] if i < len(self._epoch_starts) else self.end_offset()
        return (floor_epoch, end)

    def truncate_to(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        if offset < self._start:
            raise OffsetBelowLogStart(offset, self._start)
        if offset >= self.end_offset():
            return
        del self._entries[offset - self._start:]
        # The start epoch's marker (first, at the start offset) survives a truncation to it.
        keep = 1 if self._start else 0
        while len(self._epoch_starts) > keep and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()

    def delete_prefix(self, offset: int) -> None:
        if offset <= self._start:
            return
        if offset > self.end_offset():
            raise ValueError(f"cannot delete below {offset}: the log ends at "
                             f"{self.end_offset()}")
        start_epoch = self.epoch_at(offset - 1)
        del self._entries[:offset - self._start]
        self._start, self._start_epoch = offset, start_epoch
        self._epoch_starts = epoch_starts_from(offset, start_epoch, self._epoch_starts)

    def reset(self, offset: int, epoch: int) -> None:
        if offset < 0 or epoch < 0:
            raise ValueError(f"cannot start a log at ({offset}, {epoch})")
        self._entries = []
        self._start, self._start_epoch = offset, epoch
        self._epoch_starts = [(epoch, offset)] if offset else []

    def flush(self) -> None:
        self.flushes += 1


def epoch_starts_from(start: int, start_epoch: int,
                 starts: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """An epoch cache trimmed to a log that now starts at ``start`` with ``start_epoch``
    below it: ``(start_epoch, start)`` first, then the epochs that start at or above ``start``
    (an epoch that starts exactly there follows the marker, which then ends at once)."""
    return [(start_epoch, start)] + [(e, o) for e, o in starts
                                     if o >= start and e != start_epoch]
