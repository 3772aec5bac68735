"""One log segment: ``%020d.log`` (record batches back to back) and ``%020d.index`` (a sparse
offset index: one ``relative_offset int32, position int32`` entry every ``index_interval_bytes``).

The index lives in memory as two arrays and is appended to its file as entries are added; it can
always be rebuilt from the log, which recovery does for every segment it re-validates.

Threading: ``append``/``truncate_to``/``recover`` run on the owner's thread (the reactor);
``read_at`` uses ``os.pread`` and ``flush`` uses ``os.fsync`` on the descriptors, both safe to
call from another thread while appends continue.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from broker_core.wire.records import HEADER_SIZE, BatchInfo, scan_valid_prefix

_index_entry = struct.Struct(">ii")
_batch_prefix = struct.Struct(">qi")


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    """See the module docstring."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 created_ms: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / segment_name(base_offset, ".log")
        self.index_path = directory / segment_name(base_offset, ".index")
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offsets = array("q")
        self.positions = array("q")
        self.next_offset = base_offset  # one past the last offset in this segment
        self.max_timestamp = -1
        self.bytes_since_index = 0
        self.closed = False

    # -- loading -----------------------------------------------------------------------------

    def load_index(self) -> bool:
        """Load the index file; False if it is unusable (then call :meth:`recover`)."""
        raw = os.pread(self.index_fd, os.fstat(self.index_fd).st_size, 0)
        if len(raw) % 8:
            return False
        last_pos = -1
        for rel, pos in _index_entry.iter_unpack(raw):
            if pos <= last_pos or pos >= self.size or rel < 0:
                return False
            self.offsets.append(self.base_offset + rel)
            self.positions.append(pos)
            last_pos = pos
        return True

    def scan_tail(self) -> None:
        """Find ``next_offset`` by walking batch headers from the last index entry (no CRC)."""
        pos = self.positions[-1] if self.positions else 0
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                break
            base, length = _batch_prefix.unpack_from(head, 0)
            last_delta = struct.unpack_from(">i", head, 23)[0]
            max_ts = struct.unpack_from(">q", head, 35)[0]
            self.next_offset = base + last_delta + 1
            self.max_timestamp = max(self.max_timestamp, max_ts)
            pos += length + 12

    def recover(self, max_message_bytes: int) -> tuple[int, int]:
        """Re-validate every batch (CRC, lengths, offsets increasing), truncate at the first bad
        or torn one, and rebuild the index. Returns ``(batches_checked, bytes_truncated)``."""
        data = os.pread(self.fd, self.size, 0)
        valid, infos = scan_valid_prefix(data)
        # Offsets must increase; a batch going backwards is garbage from a torn write.
        good = 0
        expected = self.base_offset
        for info in infos:
            if info.base_offset < expected:
                break
            expected = info.last_offset + 1
            good += 1
        infos = infos[:good]
        valid = infos[-1].position + infos[-1].size if infos else 0
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self.fd, valid)
            self.size = valid
        self._rebuild_index(infos)
        return len(infos), truncated

    def _rebuild_index(self, infos: list[BatchInfo]) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        os.ftruncate(self.index_fd, 0)
        self.bytes_since_index = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        entries = bytearray()
        for info in infos:
            if self._index_due(info.size):
                self.offsets.append(info.base_offset)
                self.positions.append(info.position)
                entries += _index_entry.pack(info.base_offset - self.base_offset, info.position)
            self.next_offset = info.last_offset + 1
            self.max_timestamp = max(self.max_timestamp, info.max_timestamp)
        if entries:
            os.write(self.index_fd, bytes(entries))

    def _index_due(self, batch_size: int) -> bool:
        due = not self.positions or self.bytes_since_index >= self.index_interval_bytes
        if due:
            self.bytes_since_index = batch_size
        else:
            self.bytes_since_index += batch_size
        return due

    # -- writing -----------------------------------------------------------------------------

    def append(self, data: bytes | bytearray, infos: list[BatchInfo]) -> None:
        """Append whole batches (``infos`` describe them with positions relative to ``data``)."""
        start = self.size
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.write(self.fd, view[written:])
        entries = bytearray()
        for info in infos:
            if self._index_due(info.size):
                pos = start + info.position
                self.offsets.append(info.base_offset)
                self.positions.append(pos)
                entries += _index_entry.pack(info.base_offset - self.base_offset, pos)
            if info.max_timestamp > self.max_timestamp:
                self.max_timestamp = info.max_timestamp
        if entries:
            os.write(self.index_fd, bytes(entries))
        self.size += len(data)
        self.next_offset = infos[-1].last_offset + 1

    def truncate_to(self, offset: int) -> int:
        """Drop batches whose base offset is >= ``offset``; return the bytes removed."""
        if offset >= self.next_offset:
            return 0
        pos = self.position_of(offset)
        if pos is None:
            pos = self.size
        data = os.pread(self.fd, pos, 0)
        _, infos = scan_valid_prefix(data, verify_crc=False)
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self._rebuild_index(infos)
        return removed

    # -- reading -----------------------------------------------------------------------------

    def _floor(self, offset: int) -> int:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def find(self, offset: int) -> tuple[int, int, int] | None:
        """The batch containing ``offset`` or the first after it: ``(position, base, last)``."""
        pos = self._floor(offset)
        while pos < self.size:
            head = os.pread(self.fd, 23 + 4, pos)
            if len(head) < 27:
                return None
            base, length = _batch_prefix.unpack_from(head, 0)
            last = base + struct.unpack_from(">i", head, 23)[0]
            if last >= offset:
                return pos, base, last
            pos += length + 12
        return None

    def position_of(self, offset: int) -> int | None:
        found = self.find(offset)
        return None if found is None else found[0]

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def batches_from(self, position: int, limit_bytes: int) -> list[tuple[int, int, int, int]]:
        """Headers ``(position, size, base, last)`` of batches from ``position`` within
        ``limit_bytes`` (always at least one if any)."""
        out = []
        pos = position
        while pos < self.size:
            head = os.pread(self.fd, 27, pos)
            if len(head) < 27:
                break
            base, length = _batch_prefix.unpack_from(head, 0)
            size = length + 12
            if out and pos + size - position > limit_bytes:
                break
            out.append((pos, size, base, base + struct.unpack_from(">i", head, 23)[0]))
            pos += size
        return out

    def timestamp_search(self, timestamp_ms: int) -> tuple[int, int] | None:
        """First batch with max timestamp >= target: ``(base_offset, max_timestamp)``."""
        pos = 0
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                break
            base, length = _batch_prefix.unpack_from(head, 0)
            max_ts = struct.unpack_from(">q", head, 35)[0]
            if max_ts >= timestamp_ms:
                return base, max_ts
            pos += length + 12
        return None

    # -- durability and lifecycle ------------------------------------------------------------

    def flush(self) -> None:
        if self.closed:
            return
        try:
            os.fsync(self.fd)
            os.fsync(self.index_fd)
        except OSError:
            if not self.closed:  # closed under us by retention: nothing left to make durable
                raise

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)
            os.close(self.index_fd)

    def delete(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
