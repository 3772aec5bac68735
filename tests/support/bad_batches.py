"""Hostile record batches for the validator and decoder tests: batches with a valid CRC whose
records are garbage or whose record count lies, and compression bombs (a small payload that
decompresses to GiBs), each made in milliseconds without ever holding the decompressed data.

Bombs:

- zstd: a frame of 32,768 RLE blocks of 128 KiB each (4 bytes apiece): 128 KiB -> 4 GiB;
- gzip: one deflate block of 1 MiB of zeros, emitted after a full flush so that every copy is
  the same bytes, repeated 900 times in one gzip member (with the right CRC and size trailer):
  about 1 MiB -> 900 MiB;
- lz4: an LZ4 frame of 62 identical independent 4 MiB blocks of zeros: 1 MiB -> 248 MiB;
- snappy: a raw snappy block whose length preamble claims 4 GiB.
"""

from __future__ import annotations

import struct
import zlib

import crc32c

from broker_core.wire.records import Compression

_after_crc = struct.Struct(">hiqqqhii")
_before_crc = struct.Struct(">qiibI")

GiB = 1 << 30
MiB = 1 << 20


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varint(v: int) -> bytes:
    """Zig-zag varint, as Kafka's records use."""
    return uvarint((v << 1) ^ (v >> 63))


def record(offset_delta: int, value: bytes | None = b"v", *, key: bytes | None = None,
           ts_delta: int = 0, headers: bytes = b"\x00") -> bytes:
    """One record (length prefix included); ``headers`` is the raw header section."""
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    for part in (key, value):
        body += varint(-1) if part is None else varint(len(part)) + part
    body += headers
    return varint(len(body)) + body


def batch(payload: bytes, count: int, *, compression: Compression = Compression.NONE,
          last_delta: int | None = None, base_ts: int = 0, max_ts: int | None = None,
          attributes: int = 0) -> bytes:
    """A RecordBatch v2 around ``payload`` with a correct CRC, whatever the payload is."""
    last = count - 1 if last_delta is None else last_delta
    after = _after_crc.pack(int(compression) | attributes, last, base_ts,
                            base_ts if max_ts is None else max_ts, -1, -1, -1, count) + payload
    length = len(after) + 9  # partitionLeaderEpoch, magic, crc
    return _before_crc.pack(0, length, -1, 2, crc32c.crc32c(after)) + after


def zstd_bomb(blocks: int = 32768) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB: 4 bytes each in, 128 KiB each out."""
    header = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])  # no content size, 128 KiB window
    block = ((128 * 1024) << 3 | 1 << 1).to_bytes(3, "little") + b"\x00"
    last = ((128 * 1024) << 3 | 1 << 1 | 1).to_bytes(3, "little") + b"\x00"
    return header + block * (blocks - 1) + last


def gzip_bomb(mib: int = 900) -> bytes:
    """One gzip member holding ``mib`` MiB of zeros, built from one repeated deflate chunk."""
    zeros = bytes(MiB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    # After a full flush the compressor starts afresh: each further MiB is the same bytes.
    assert c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH) == again
    tail = c.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<II", crc, (mib * MiB) & 0xFFFFFFFF)
    return header + first + again * (mib - 1) + tail + trailer


def lz4_bomb(blocks: int = 62) -> bytes:
    """An LZ4 frame of ``blocks`` identical independent blocks of 4 MiB of zeros."""
    import lz4.frame

    one = lz4.frame.compress(bytes(4 * MiB), block_size=lz4.frame.BLOCKSIZE_MAX4MB,
                             block_linked=False, content_checksum=False, store_size=False)
    header = one[:7]
    (n,) = struct.unpack_from("<I", one, 7)
    block = one[7:11 + (n & 0x7FFFFFFF)]
    assert one[11 + (n & 0x7FFFFFFF):] == b"\x00\x00\x00\x00"  # the end mark
    return header + block * blocks + b"\x00\x00\x00\x00"


def snappy_bomb() -> bytes:
    """A raw snappy block claiming 4 GiB (then a literal that is far too short)."""
    return uvarint(4 * GiB - 1) + b"\x00a"


BOMBS = {
    Compression.ZSTD: zstd_bomb,
    Compression.GZIP: gzip_bomb,
    Compression.LZ4: lz4_bomb,
    Compression.SNAPPY: snappy_bomb,
}


def bomb_batch(codec: Compression) -> bytes:
    """A one-record batch whose payload is ``codec``'s bomb."""
    return batch(BOMBS[codec](), 1, compression=codec)
