"""The leader-epoch file of a partition (seed 003's "leader generation sequence file").

Each entry says "leader epoch E started at offset O". Entries are strictly increasing in both
epoch and start offset; the file is the checkpoint format of :mod:`.checkpoints` with lines
``epoch start_offset`` and is rewritten atomically on every change (changes are rare: one per
leader change, truncation or retention).
"""

from __future__ import annotations

from pathlib import Path

from broker_core.log.checkpoints import format_lines, parse_lines, write_atomically

FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochFile:
    """In-memory entries mirrored to ``leader-epoch-checkpoint``; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.entries: list[tuple[int, int]] = []
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in parse_lines(text, str(self.path)):
            epoch, offset = line.split()
            self.entries.append((int(epoch), int(offset)))

    def _save(self) -> None:
        write_atomically(self.path, format_lines(f"{e} {o}" for e, o in self.entries))

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        return self.entries[-1] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False if it adds nothing (an older or
        the same epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        # A newer epoch starting at or before an existing entry's offset supersedes it.
        self.entries = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries.append((epoch, start_offset))
        self._save()
        return True

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, offset where the next epoch starts
        or the log end)``; ``(-1, -1)`` when the epoch is older than every entry."""
        if not self.entries or epoch < self.entries[0][0]:
            return (-1, -1)
        if epoch >= self.entries[-1][0]:
            return (self.entries[-1][0], log_end_offset)
        for i, (e, _) in enumerate(self.entries):
            if e > epoch:
                return (self.entries[i - 1][0], self.entries[i][1])
        return (self.entries[-1][0], log_end_offset)  # unreachable

    def truncate_from_end(self, end_offset: int) -> int:
        """Drop entries starting at or after ``end_offset``; return how many were dropped."""
        keep = [(e, o) for e, o in self.entries if o < end_offset]
        dropped = len(self.entries) - len(keep)
        if dropped:
            self.entries = keep
            self._save()
        return dropped

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries wholly before it and move the
        entry covering it up to ``start_offset``."""
        older = [(e, o) for e, o in self.entries if o <= start_offset]
        newer = [(e, o) for e, o in self.entries if o > start_offset]
        if not older or (len(older) == 1 and older[0][1] == start_offset):
            return
        self.entries = [(older[-1][0], start_offset), *newer]
        self._save()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._save()
