"""Producer-state snapshot files: ``<offset>.snapshot`` in a partition's directory holds the
producer state (:mod:`broker_core.log.producer_state`) of the log up to ``offset`` (exclusive),
so opening the log replays only the batches after the newest usable snapshot.

Format (big-endian), version 1::

    magic "SLPS" | version int16 | crc32 int32 (of every byte after it) | offset int64 |
    count int32 | count x (producer id int64 | epoch int16 | batch count int8 |
                           batch count x (first seq int32 | last seq int32 |
                                          first offset int64 | last offset int64 |
                                          max timestamp int64))

Producers are stored least recently written first, so restoring keeps the eviction order.

A file is used only if every check passes: the magic, version and CRC, the offset matching the
file name, at most ``max_producers`` entries of 1 to :data:`MAX_BATCHES` batches each, ids,
epochs and sequences in range, each producer's offsets increasing and below the snapshot's
offset, and nothing after the last entry. Anything else is :class:`SnapshotError`; the log then
ignores the file (with a warning) and rebuilds from an older snapshot or the log itself.

Files are written through a temp file and a rename, without an fsync: a snapshot torn by a
crash fails its CRC and is ignored, and one past the recovered log's end is deleted.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from broker_core.log.checkpoints import TMP_SUFFIX
from broker_core.log.producer_state import (
    INT16_MAX,
    INT32_MAX,
    MAX_BATCHES,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
)

SUFFIX = ".snapshot"
MAGIC = b"SLPS"
VERSION = 1
_HEAD = struct.Struct(">4shi")
_BODY_HEAD = struct.Struct(">qi")
_ENTRY = struct.Struct(">qhb")
_BATCH = struct.Struct(">iiqqq")


class SnapshotError(ValueError):
    """A snapshot file that is not usable; the message says why."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for p in directory.iterdir():
        if p.suffix == SUFFIX and p.stem.isdigit() and p.stem.isascii():
            out.append(int(p.stem))
    return sorted(out)


def encode(state: ProducerStateManager, offset: int) -> bytes:
    parts = [_BODY_HEAD.pack(offset, len(state.entries))]
    for entry in state.entries.values():
        parts.append(_ENTRY.pack(entry.producer_id, entry.epoch, len(entry.batches)))
        parts.extend(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                                 b.timestamp) for b in entry.batches)
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _HEAD.pack(MAGIC, VERSION, crc - (1 << 32) if crc >= 1 << 31 else crc) + body


def decode(data: bytes, offset: int, max_producers: int) -> list[ProducerEntry]:
    """The entries of a snapshot of ``offset``; :class:`SnapshotError` if any check fails."""
    if len(data) < _HEAD.size + _BODY_HEAD.size:
        raise SnapshotError(f"{len(data)} bytes is shorter than a snapshot's header")
    magic, version, crc = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise SnapshotError(f"not a version {VERSION} producer snapshot (magic {magic!r}, "
                            f"version {version})")
    body = memoryview(data)[_HEAD.size:]
    if zlib.crc32(body) != crc & 0xFFFFFFFF:
        raise SnapshotError("CRC mismatch (a torn or damaged file)")
    stored, count = _BODY_HEAD.unpack_from(body)
    if stored != offset:
        raise SnapshotError(f"holds offset {stored}, its name says {offset}")
    if not 0 <= count <= max_producers:
        raise SnapshotError(f"{count} producers; at most {max_producers} are kept")
    pos = _BODY_HEAD.size
    entries = []
    try:
        for _ in range(count):
            pid, epoch, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            if pid < 0 or not 0 <= epoch <= INT16_MAX or not 1 <= n <= MAX_BATCHES:
                raise SnapshotError(f"producer {pid} epoch {epoch} with {n} batches is out of "
                                    "bounds")
            entry = ProducerEntry(pid, epoch)
            previous = -1
            for _ in range(n):
                b = BatchMetadata(*_BATCH.unpack_from(body, pos))
                pos += _BATCH.size
                if not (0 <= b.first_seq <= INT32_MAX and 0 <= b.last_seq <= INT32_MAX
                        and previous < b.first_offset <= b.last_offset < offset):
                    raise SnapshotError(f"producer {pid}'s batch {b} is out of bounds")
                previous = b.last_offset
                entry.batches.append(b)
            entries.append(entry)
    except struct.error:
        raise SnapshotError("ends inside an entry") from None
    if pos != len(body):
        raise SnapshotError(f"{len(body) - pos} bytes after the last entry")
    return entries


def write(directory: Path, state: ProducerStateManager, offset: int) -> Path:
    """Write the snapshot of ``state`` at ``offset`` (temp file and rename; no fsync)."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(encode(state, offset))
    os.replace(tmp, path)
    return path
