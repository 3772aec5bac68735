"""The two sparse indexes of a segment, kept in memory and mirrored to files.

``%020d.index`` — offset index, Kafka's layout: 8-byte entries ``relative_offset int32,
position int32``. Entry *i* says "the batch whose base offset is ``base + relative_offset`` starts
at byte ``position``". A lookup takes the last entry at or below the wanted offset and reads
forward from its position.

``%020d.timeindex`` — time index, 12-byte entries ``timestamp int64, relative_offset int32``,
written at the same batches as the offset index (entry *i* of both files describes the same
batch). Sluice's meaning of ``timestamp``: the largest batch timestamp in the segment *before*
that batch (-1 if none). It never decreases, so "the first batch whose max timestamp reaches T"
lies at or after the last entry whose ``timestamp < T`` — and before the entry after it.

Both indexes can always be rebuilt from the segment's batches, which recovery does; a file that
fails the checks in :meth:`OffsetIndex.load` / :meth:`TimeIndex.load` is rebuilt, never trusted.

Threading: owned by the segment's thread; :meth:`_IndexFile.dup_fd` may be called from another
thread (under the segment's lock) to fsync a duplicate descriptor.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

_offset_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")


class _IndexFile:
    """An index file written with ``pwrite`` at ``entries * entry_size``: the file always holds
    exactly the in-memory entries (after a write error, the file is cut back)."""

    def __init__(self, path: Path, entry_size: int) -> None:
        self.path = path
        self.entry_size = entry_size
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def read_all(self) -> bytes:
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0)

    def write_at(self, entry_index: int, data: bytes) -> None:
        pos = entry_index * self.entry_size
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(self.fd, view[done:], pos + done)
        except OSError:
            os.ftruncate(self.fd, pos)
            raise

    def cut(self, entries: int) -> None:
        os.ftruncate(self.fd, entries * self.entry_size)

    def dup_fd(self) -> int:
        return os.dup(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class OffsetIndex:
    """Sparse offset index of one segment (see the module docstring).

    Invariant: ``offsets`` and ``positions`` are strictly increasing, equally long, and equal to
    the file's entries; ``offsets[0] >= base_offset``.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.file = _IndexFile(path, _offset_entry.size)
        self.offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self, segment_size: int) -> bool:
        """Read the file; False (and no entries) if it is inconsistent with a segment of
        ``segment_size`` bytes: a partial entry, entries out of order, a position past the end,
        or an empty index for a non-empty segment (the first batch is always indexed)."""
        raw = self.file.read_all()
        self.offsets = array("q")
        self.positions = array("q")
        if len(raw) % _offset_entry.size:
            return False
        last_rel = last_pos = -1
        for rel, pos in _offset_entry.iter_unpack(raw):
            if rel <= last_rel or pos <= last_pos or pos >= segment_size:
                self.offsets = array("q")
                self.positions = array("q")
                return False
            self.offsets.append(self.base_offset + rel)
            self.positions.append(pos)
            last_rel, last_pos = rel, pos
        if segment_size > 0 and (not self.positions or self.positions[0] != 0):
            self.offsets = array("q")
            self.positions = array("q")
            return False
        return True

    def encode(self, offset: int, position: int) -> bytes:
        return _offset_entry.pack(offset - self.base_offset, position)

    def add(self, entries: list[tuple[int, int]], encoded: bytes) -> None:
        """Append ``(offset, position)`` entries (already encoded into ``encoded``)."""
        self.file.write_at(len(self.offsets), encoded)
        for offset, position in entries:
            self.offsets.append(offset)
            self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(entry number, position)`` of the last entry at or below ``offset``; ``(-1, 0)``
        when there is none (read from the start of the segment)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return (i, self.positions[i]) if i >= 0 else (-1, 0)

    def position_after(self, entry: int) -> int | None:
        """The position of the entry after ``entry``, if any: the batch a lookup found starts
        before it."""
        nxt = entry + 1
        return self.positions[nxt] if nxt < len(self.positions) else None

    def entries_below(self, position: int) -> int:
        """How many entries point before byte ``position``."""
        return bisect.bisect_left(self.positions, position)

    def truncate_entries(self, count: int) -> None:
        del self.offsets[count:]
        del self.positions[count:]
        self.file.cut(count)

    def reset(self) -> None:
        self.truncate_entries(0)


class TimeIndex:
    """Time index of one segment, parallel to its :class:`OffsetIndex` (see the module
    docstring).

    Invariant: ``timestamps`` never decreases and has one entry per offset-index entry, with the
    same relative offset; the file holds exactly these entries.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.file = _IndexFile(path, _time_entry.size)
        self.timestamps = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    def load(self, offsets: array) -> bool:
        """Read the file; False (and no entries) unless it matches ``offsets`` (the offset
        index's entries) one for one and its timestamps never decrease."""
        raw = self.file.read_all()
        self.timestamps = array("q")
        if len(raw) != len(offsets) * _time_entry.size:
            return False
        last = -1
        for i, (ts, rel) in enumerate(_time_entry.iter_unpack(raw)):
            if rel != offsets[i] - self.base_offset or ts < last:
                self.timestamps = array("q")
                return False
            self.timestamps.append(ts)
            last = ts
        return True

    def encode(self, timestamp: int, offset: int) -> bytes:
        return _time_entry.pack(timestamp, offset - self.base_offset)

    def add(self, timestamps: list[int], encoded: bytes) -> None:
        self.file.write_at(len(self.timestamps), encoded)
        self.timestamps.extend(timestamps)

    def first_candidate(self, timestamp_ms: int) -> int:
        """The entry to start a search for the first batch with max timestamp >= target: the
        last entry whose "max before" is below the target (0 if none is)."""
        return max(bisect.bisect_left(self.timestamps, timestamp_ms) - 1, 0)

    def truncate_entries(self, count: int) -> None:
        del self.timestamps[count:]
        self.file.cut(count)

    def reset(self) -> None:
        self.truncate_entries(0)
