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

In memory and on disk: the in-memory entries are the truth while the broker runs. No descriptor
is held: new entries wait (encoded) in memory and :meth:`_IndexFile.persist` writes them in one
batch, opening the file for that write only — at a flush, a roll, a truncation and a clean close
(the segment decides when). So the file always holds a *prefix* of the in-memory entries (never
an entry they do not have: a truncation cuts the file before new entries can be written), which
:meth:`OffsetIndex.load` accepts as it is — the batches after the last entry are walked anyway.

Threading: owned by the segment's thread; :meth:`_IndexFile.persist` may run on a flush thread.
The segment serialises both with its lock.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

_offset_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")


def _read_file(path: Path) -> bytes:
    """The whole file; empty if it does not exist (a missing index is rebuilt like a bad one)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data: bytes | bytearray, start: int) -> None:
    """Write all of ``data`` at byte ``start`` of ``fd`` (``pwrite`` may write less than
    asked). Raises OSError as ``pwrite`` does, with part of ``data`` possibly written: the
    caller cuts the file back."""
    with memoryview(data) as view:
        done = 0
        while done < len(data):
            done += os.pwrite(fd, view[done:], start + done)


class _IndexFile:
    """The file behind an index, opened only to be written.

    Invariant: the file's first ``written`` entries are the first ``written`` in-memory entries
    and ``pending`` holds the encoded entries after them; when ``stale`` is False the file holds
    nothing else (when True it may hold bytes past ``written`` entries — left by an earlier run
    or a truncation — which the next :meth:`persist` cuts off).
    """

    def __init__(self, path: Path, entry_size: int) -> None:
        self.path = path
        self.entry_size = entry_size
        self.written = 0
        self.pending = bytearray()
        self.stale = True  # unknown until loaded or written

    def read_all(self) -> bytes:
        return _read_file(self.path)

    def loaded(self, entries: int) -> None:
        """The file was read and holds exactly ``entries`` entries, all kept in memory."""
        self.written = entries
        self.pending = bytearray()
        self.stale = False

    def add(self, encoded: bytes | bytearray) -> None:
        self.pending += encoded

    def cut(self, entries: int) -> None:
        """Forget in-memory entries from ``entries`` on; the file is cut at the next persist."""
        if entries < self.written:
            self.written = entries
            self.pending = bytearray()
            self.stale = True
        else:
            del self.pending[(entries - self.written) * self.entry_size:]

    @property
    def dirty(self) -> bool:
        return bool(self.pending) or self.stale

    def persist(self, *, keep_open: bool = False) -> int | None:
        """Make the file hold exactly the in-memory entries: cut what it must not hold, write the
        pending entries with ``pwrite``. Opens the file for this only; with ``keep_open`` the
        descriptor is returned (for an fsync: the caller closes it), else closed.

        On a write error the file is cut back to the entries written before, so it never ends
        in a partial entry, and the entries stay pending."""
        if not keep_open and not self.dirty:
            return None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            start = self.written * self.entry_size
            if self.stale:
                os.ftruncate(fd, start)
                self.stale = False
            if self.pending:
                data = self.pending
                try:
                    pwrite_all(fd, data, start)
                except OSError:
                    self.stale = True
                    os.ftruncate(fd, start)
                    self.stale = False
                    raise
                self.written += len(data) // self.entry_size
                self.pending = bytearray()
        except BaseException:
            os.close(fd)
            raise
        if keep_open:
            return fd
        os.close(fd)
        return None


class OffsetIndex:
    """Sparse offset index of one segment (see the module docstring).

    Invariant: ``offsets`` and ``positions`` are strictly increasing and equally long;
    ``offsets[0] >= base_offset``; the file holds a prefix of them (see :class:`_IndexFile`).
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
        self.file.cut(0)
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
        self.file.loaded(len(self.offsets))
        return True

    def encode(self, offset: int, position: int) -> bytes:
        return _offset_entry.pack(offset - self.base_offset, position)

    def add(self, entries: list[tuple[int, int]], encoded: bytes | bytearray) -> None:
        """Append ``(offset, position)`` entries (already encoded into ``encoded``); the file gets
        them at the next :meth:`_IndexFile.persist`."""
        self.file.add(encoded)
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
    same relative offset; the file holds a prefix of them (see :class:`_IndexFile`).
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
        self.file.cut(0)
        if len(raw) != len(offsets) * _time_entry.size:
            return False
        last = -1
        for i, (ts, rel) in enumerate(_time_entry.iter_unpack(raw)):
            if rel != offsets[i] - self.base_offset or ts < last:
                self.timestamps = array("q")
                return False
            self.timestamps.append(ts)
            last = ts
        self.file.loaded(len(self.timestamps))
        return True

    def encode(self, timestamp: int, offset: int) -> bytes:
        return _time_entry.pack(timestamp, offset - self.base_offset)

    def add(self, timestamps: list[int], encoded: bytes | bytearray) -> None:
        self.file.add(encoded)
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
