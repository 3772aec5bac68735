"""The log the Raft core replicates: the :class:`IRaftLog` seam and an in-memory implementation.

The core needs only a handful of operations: append entries, read from an offset, truncate the
end, and answer "where does epoch E end in this log?" (seed 003's leader-epoch semantics, the
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


class IRaftLog(Interface):
    """An append-only sequence of :class:`LogEntry` with dense offsets from 0, whose epochs
    never decrease. Only :meth:`truncate_to` removes entries, and only from the end."""

    def end_offset():
        """The offset the next entry will get (0 for an empty log)."""

    def last_epoch():
        """The epoch of the last entry, 0 for an empty log."""

    def epoch_at(offset):
        """The epoch of the entry at ``offset``; 0 for ``offset == -1`` (before the log)."""

    def append(entries):
        """Append ``entries`` (a sequence of LogEntry); the first must sit at ``end_offset()``,
        offsets must be dense and epochs non-decreasing, else LogInvariantError."""

    def read(start_offset, max_entries):
        """Up to ``max_entries`` entries from ``start_offset`` (a tuple, empty at the end)."""

    def end_offset_for_epoch(epoch):
        """``(e, end)``: ``e`` is the largest epoch in the log not above ``epoch`` and ``end``
        the offset where ``e`` ends (the start of the next epoch, or the log end offset).
        ``(0, 0)`` when no entry has an epoch <= ``epoch``."""

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
    """:class:`IRaftLog` in a list. Invariant: ``entries[i].offset == i``, epochs never
    decrease, and ``_epoch_starts`` lists ``(epoch, first offset)`` for every epoch present, in
    order (the leader-epoch cache, kept in step with the entries)."""

    def __init__(self, entries: Sequence[LogEntry] = ()) -> None:
        self._entries: list[LogEntry] = []
        self._epoch_starts: list[tuple[int, int]] = []
        self.flushes = 0  # test-only: how often the driver flushed
        self.append(entries)

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        """Test-only: every entry, in order."""
        return tuple(self._entries)

    def end_offset(self) -> int:
        return len(self._entries)

    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

    def epoch_at(self, offset: int) -> int:
        if offset == -1:
            return 0
        return self._entries[offset].epoch

    def append(self, entries: Sequence[LogEntry]) -> None:
        check_appendable(entries, len(self._entries), self.last_epoch())
        for entry in entries:
            if not self._epoch_starts or self._epoch_starts[-1][0] != entry.epoch:
                self._epoch_starts.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def read(self, start_offset: int, max_entries: int) -> tuple[LogEntry, ...]:
        if start_offset < 0:
            raise ValueError(f"negative read offset {start_offset}")
        return tuple(self._entries[start_offset:start_offset + max_entries])

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        # Index of the first epoch start above ``epoch``; the one before it is the floor.
        i = bisect.bisect_right(self._epoch_starts, (epoch, float("inf")))
        if i == 0:
            return (0, 0)
        floor_epoch = self._epoch_starts[i - 1][0]
        end = self._epoch_starts[i][1] if i < len(self._epoch_starts) else len(self._entries)
        return (floor_epoch, end)

    def truncate_to(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        if offset >= len(self._entries):
            return
        del self._entries[offset:]
        while self._epoch_starts and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()

    def flush(self) -> None:
        self.flushes += 1
