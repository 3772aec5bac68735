"""The leader-epoch file of a partition: seed 003's "leader generation sequence file", Kafka's
``leader-epoch-checkpoint``.

Each entry says "leader epoch E started at offset O". The file is the checkpoint format of
:mod:`.checkpoints` with ``epoch start_offset`` lines, rewritten atomically (tmp, rename) on
every change and fsynced by the log's next flush (:meth:`LeaderEpochFile.sync`), not at once: a
controller that moves thousands of leaders at once would otherwise cost two fsyncs per partition
on the reactor thread. What a crash loses of it, recovery rebuilds from the batches' epochs.

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
from typing import NamedTuple

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
        self._lock = threading.Lock()
        self._dirty = False
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
        # Not fsynced here: becoming leader of thousands of partitions at once would cost two
        # fsyncs each on the reactor thread (seconds). The log's flush fsyncs the file first
        # (see :meth:`sync`), and recovery after a crash rebuilds entries from the batches
        # themselves, which carry their epochs (seed 003's "rebuild the potentially missing
        # part").
        write_atomically(self.path, format_lines(f"{e} {o}" for e, o in self._entries),
                         sync=False)
        with self._lock:
            self._dirty = True

    def sync(self) -> None:
        """Make the file durable if it changed since the last sync. BLOCKING (fsync); safe to
        call from an IO thread while the reactor thread changes the entries: the lock guards
        only the flag, never the fsync, so the reactor never waits for the disk here. A change
        made during the fsync sets the flag again and is synced next time."""
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
