"""Record batch payload codecs (gzip, snappy, lz4, zstd), and the one bounded decompressor every
reader of record data uses: the broker's log validator, the batch decoder in
:mod:`broker_core.wire.records`, the consumer's decoder and the Spark column decoder.

Invariant: :func:`decompress` never holds more than ``max_bytes`` (+1) bytes of output, whatever
the payload claims or contains. A compression bomb (a few hundred KiB that expand to GiBs) is
refused with :class:`DecompressedTooLarge` after at most ``max_bytes + 1`` bytes were produced;
a payload that does not decompress raises :class:`~broker_core.wire.records.CorruptRecordBatch`.
Both are :class:`~broker_core.wire.records.InvalidRecordBatch`, so a reader refuses the batch
and never aborts the process.

How each codec is bounded:

- gzip: :func:`zlib.decompressobj` with ``max_length`` (streaming), one gzip member after another
  (a gzip stream may hold several, as Java's GZIPInputStream reads them; bytes after the last
  member that do not start another are ignored, as there);
- snappy: a raw snappy block states its decompressed length in a varint preamble, which is checked
  before anything is allocated (the decompressor then produces exactly that length or fails);
  the Java client's xerial framing is a sequence of such blocks, checked block by block;
- lz4 (frame format) and zstd: the decompressor writes into an output buffer of fixed size and
  fails when it is full (``cramjam``'s ``decompress_into``, which streams internally); the buffer
  first gets a size guessed from the payload, then eight times more on each overflow, up to
  ``max_bytes + 1``, so a batch of ordinary ratio never pays for zero-filling a large buffer.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from broker_core.wire.errors import MalformedFrame
from broker_core.wire.primitives import read_varint
from broker_core.wire.records import Compression, CorruptRecordBatch

#: The clients' default bound on one batch's decompressed records: a Kafka broker's batches are
#: at most ``message.max.bytes`` (1 MiB by default) compressed, so a legitimate batch fits with a
#: wide margin; a bomb does not.
CLIENT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

# The first output buffer for lz4/zstd: this many times the payload, at least _MIN_GUESS bytes.
_GUESS_RATIO = 8
_MIN_GUESS = 64 * 1024
# gzip output is taken this many bytes at a time.
_CHUNK = 256 * 1024

# Java clients frame snappy the xerial way: this 8-byte magic, two int32 versions, then
# (int32 length, raw snappy block) pairs. librdkafka and others send plain raw snappy.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_int32 = struct.Struct(">i")


class DecompressedTooLarge(CorruptRecordBatch):
    """A payload that decompresses to more than the allowed bytes: a compression bomb, or a batch
    larger than ``max.message.bytes`` once decompressed -> MESSAGE_TOO_LARGE."""

    error_code_name = "MESSAGE_TOO_LARGE"

    def __init__(self, codec: Compression, max_bytes: int) -> None:
        super().__init__(f"{codec.name} payload decompresses to more than {max_bytes} "
                         "bytes")
        self.codec = codec
        self.max_bytes = max_bytes


def compress(codec: Compression, raw: bytes) -> bytes:
    """A record batch's payload compressed with ``codec`` as Kafka clients expect it (gzip
    container, raw snappy, LZ4 frame, zstd frame)."""
    if codec is Compression.NONE:
        return raw
    if codec is Compression.GZIP:
        c = zlib.compressobj(wbits=31)  # 31 = gzip container, which every Kafka client reads
        return c.compress(raw) + c.flush()
    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(raw))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(raw))  # LZ4 frame format, as Kafka >= 0.10 expects
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(raw))
    raise ValueError(f"unknown compression {codec!r}")


def decompress(codec: Compression, data: bytes | bytearray | memoryview, *,
               max_bytes: int) -> bytes:
    """``data`` decompressed with ``codec`` (snappy raw or xerial-framed), at most ``max_bytes``
    bytes of it: :class:`DecompressedTooLarge` beyond that, :class:`CorruptRecordBatch` for a
    payload that does not decompress. Memory held is bounded by ``max_bytes + 1`` whatever
    ``data`` is."""
    if max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
    if codec is Compression.NONE:
        if len(data) > max_bytes:
            raise DecompressedTooLarge(codec, max_bytes)
        return bytes(data)
    try:
        if codec is Compression.GZIP:
            return _gunzip(data, max_bytes)
        if codec is Compression.SNAPPY:
            return _unsnappy(data, max_bytes)
        if codec is Compression.LZ4:
            return _into(cramjam.lz4, codec, data, max_bytes)
        if codec is Compression.ZSTD:
            return _into(cramjam.zstd, codec, data, max_bytes)
    except (zlib.error, cramjam.DecompressionError) as e:
        raise CorruptRecordBatch(f"{codec.name} payload does not decompress: {e}") \
            from None
    raise CorruptRecordBatch(f"unknown compression codec {int(codec)}")


#: Input fed to zlib at a time: what zlib copies out (``unused_data``, ``unconsumed_tail``) is
#: at most this much, however long the payload (feeding it whole made every gzip member copy
#: the rest of the payload: quadratic for many small members).
_GZIP_INPUT_WINDOW = 64 * 1024
#: Gzip members one payload may hold. Producers write one per batch; concatenated members are
#: legal gzip, but thousands of empty ones are only a way to burn the broker's CPU.
MAX_GZIP_MEMBERS = 1024


def _gunzip(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray()
    pos = 0  # where the input not yet given to zlib starts
    for _ in range(MAX_GZIP_MEMBERS):
        d = zlib.decompressobj(wbits=47)  # 47 = accept a gzip or zlib header
        tail: bytes | memoryview = b""
        while True:
            if not tail:
                tail = view[pos:pos + _GZIP_INPUT_WINDOW]
                pos += len(tail)
            # At most _CHUNK at a time, so the peak is the output so far plus one chunk.
            room = min(_CHUNK, max_bytes + 1 - len(out))
            chunk = d.decompress(tail, room)
            out += chunk
            if len(out) > max_bytes:
                raise DecompressedTooLarge(Compression.GZIP, max_bytes)
            tail = d.unconsumed_tail
            if d.eof:
                break
            # A capped call may leave output pending inside zlib even with no input left:
            # only an uncapped call with nothing left to read means the input is used up.
            if not tail and pos >= len(view) and len(chunk) < room:
                raise CorruptRecordBatch("GZIP payload does not decompress: truncated stream")
        pos -= len(d.unused_data)  # the next member starts right after this one
        if bytes(view[pos:pos + 2]) != b"\x1f\x8b":
            # Bytes after a member that do not start another are ignored, as zlib.decompress
            # and Java's GZIPInputStream do.
            return bytes(out)
    raise CorruptRecordBatch(f"GZIP payload has more than {MAX_GZIP_MEMBERS} members")


def _snappy_length(block: bytes | memoryview) -> int:
    """The decompressed length a raw snappy block declares (its little-endian varint preamble)."""
    try:
        return read_varint(block, 0, len(block), 5, "SNAPPY length preamble", False)[0]
    except MalformedFrame:
        raise CorruptRecordBatch("SNAPPY payload does not decompress: bad length preamble"
                                 ) from None


def _unsnappy(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_length(data) > max_bytes:
            raise DecompressedTooLarge(Compression.SNAPPY, max_bytes)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordBatch("truncated xerial snappy block length")
        (n,) = _int32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordBatch(f"xerial snappy block of {n} bytes overruns the batch")
        block = data[pos:pos + n]
        if len(out) + _snappy_length(block) > max_bytes:
            raise DecompressedTooLarge(Compression.SNAPPY, max_bytes)
        out += cramjam.snappy.decompress_raw(block)
        pos += n
    return bytes(out)


def _into(module: object, codec: Compression, data: bytes | bytearray | memoryview,
          max_bytes: int) -> bytes:
    # The decompressor fails ("failed to write whole buffer") once the buffer is full. A buffer
    # that fills up proves nothing but "more than its size": try one _GUESS_RATIO times larger,
    # up to max_bytes + 1, whose filling up means too large. Each try starts over, so the work
    # is at most about 8/7 of the last one's, and a batch of ordinary ratio never pays for
    # zero-filling a buffer of max_bytes.
    decompress_into = module.decompress_into  # type: ignore[attr-defined]
    data = bytes(data)
    size = min(max_bytes, max(_MIN_GUESS, _GUESS_RATIO * len(data)))
    while True:
        buf = bytearray(size + 1)
        try:
            n = decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "write whole buffer" not in str(e):
                raise
            n = size + 1
        if n <= size:
            return bytes(memoryview(buf)[:n])
        if size >= max_bytes:
            raise DecompressedTooLarge(codec, max_bytes)
        del buf  # before the larger one is allocated: at most one buffer at a time
        size = min(max_bytes, size * _GUESS_RATIO)
