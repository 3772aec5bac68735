"""The bounded decompressor (broker_core.wire.compression) and the client decoders built on it:
every codec round-trips up to the bound and refuses a byte more; a compression bomb raises a
clear DecompressedTooLarge in the batch decoder, the consumer's decoder and the Spark column
decoder instead of allocating GiBs (Sluice's consumer used to abort the process on the zstd
one: "memory allocation of 1073741824 bytes failed")."""

from __future__ import annotations

import struct
import zlib

import cramjam
import pytest

from broker_core.wire.compression import DecompressedTooLarge, compress, decompress
from broker_core.wire.records import (
    Compression,
    CorruptRecordBatch,
    Record,
    build_batch,
    decode_batch,
    decode_records,
)
from consumer_client.consumer_records import decode_chunk
from tests.support import bad_batches as bb
from tests.support.memory import peak_rss_mib, reset_peak_rss_mib

MiB = 1 << 20
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]



@pytest.mark.parametrize("codec", [Compression.NONE, *CODECS])
@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
def test_round_trip_up_to_the_bound_and_not_a_byte_more(codec, size):
    raw = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    payload = compress(codec, raw)
    assert decompress(codec, payload, max_bytes=size) == raw
    assert decompress(codec, memoryview(payload), max_bytes=size + 10) == raw
    if size:
        with pytest.raises(DecompressedTooLarge):
            decompress(codec, payload, max_bytes=size - 1)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_a_high_ratio_payload_within_the_bound_decompresses(codec):
    # Past the first guessed buffer (8x the payload), within the bound: the full-size retry.
    raw = bytes(4 * MiB)
    payload = compress(codec, raw)
    assert len(payload) * 8 < len(raw)
    assert decompress(codec, payload, max_bytes=4 * MiB) == raw
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, payload, max_bytes=4 * MiB - 1)


@pytest.mark.parametrize("codec", CODECS)
def test_a_large_bound_is_not_allocated_for_a_small_batch(codec):
    # The bound caps the output; a batch that needs little gets little, even at a high ratio.
    raw = bytes(2 * MiB)
    payload = compress(codec, raw)
    before = reset_peak_rss_mib()
    assert decompress(codec, payload, max_bytes=1 << 30) == raw
    assert peak_rss_mib() - before < 64


def test_xerial_snappy_is_bounded_block_by_block():
    blocks = [bytes(cramjam.snappy.compress_raw(b"a" * 1000)) for _ in range(3)]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for block in blocks:
        xerial += struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, xerial, max_bytes=3000) == b"a" * 3000
    with pytest.raises(DecompressedTooLarge):
        decompress(Compression.SNAPPY, xerial, max_bytes=2999)


def test_gzip_with_several_members_is_read_whole():
    payload = compress(Compression.GZIP, b"one ") + compress(Compression.GZIP, b"two")
    assert decompress(Compression.GZIP, payload, max_bytes=7) == b"one two"
    with pytest.raises(DecompressedTooLarge):
        decompress(Compression.GZIP, payload, max_bytes=6)
    # Trailing bytes that start no member are ignored (zlib.decompress did so before).
    assert decompress(Compression.GZIP, payload + b"\x00\x00", max_bytes=7) == b"one two"
    with pytest.raises(CorruptRecordBatch):  # ...but a second member must be whole
        decompress(Compression.GZIP, payload + b"\x1f\x8b\x08", max_bytes=100)


@pytest.mark.parametrize("codec", CODECS)
def test_a_payload_that_does_not_decompress_is_corrupt_not_too_large(codec):
    garbage = b"\x1f\x8b\x08\x00 not really" if codec is Compression.GZIP else b"\x04\x22garbage"
    with pytest.raises(CorruptRecordBatch, match=f"{codec.name} payload does not decompress") \
            as e:
        decompress(codec, garbage, max_bytes=MiB)
    assert not isinstance(e.value, DecompressedTooLarge)
    truncated = compress(codec, bytes(range(256)) * 100)[:-7]
    with pytest.raises(CorruptRecordBatch):
        decompress(codec, truncated, max_bytes=MiB)


@pytest.mark.parametrize("codec", CODECS)
def test_each_bomb_is_refused_at_the_bound(codec):
    bomb = bb.BOMBS[codec]()
    before = reset_peak_rss_mib()
    with pytest.raises(DecompressedTooLarge, match=f"more than {MiB} bytes"):
        decompress(codec, bomb, max_bytes=MiB)
    assert peak_rss_mib() - before < 64


# -- the client decoders --------------------------------------------------------------------------


def _bomb_chunk(codec: Compression) -> bytes:
    good = build_batch([Record(None, b"before the bomb", [], 5)])
    return good + bb.bomb_batch(codec)


#: The clients' default bound is 64 MiB a batch; the peak may also hold the previous, smaller
#: try's buffer and what the allocator keeps. A bomb's output is 248 MiB to 4 GiB.
DEFAULT_BOUND_PEAK_MIB = 160


@pytest.mark.parametrize("codec", CODECS)
def test_the_consumer_decoder_fails_clearly_on_a_bomb(codec):
    # A smaller bound is the caller's to choose: it holds the peak to about that.
    before = reset_peak_rss_mib()
    with pytest.raises(DecompressedTooLarge, match=f"more than {MiB} bytes"):
        decode_chunk("t", 0, _bomb_chunk(codec), 0, max_decompressed_bytes=MiB)
    assert peak_rss_mib() - before < 32
    with pytest.raises(DecompressedTooLarge) as e:
        decode_chunk("t", 0, _bomb_chunk(codec), 0)
    assert f"{codec.name} payload decompresses to more than" in str(e.value)
    assert "of t-0" in str(e.value)
    assert peak_rss_mib() - before < DEFAULT_BOUND_PEAK_MIB


@pytest.mark.parametrize("codec", CODECS)
def test_the_batch_decoder_fails_clearly_on_a_bomb(codec):
    before = reset_peak_rss_mib()
    with pytest.raises(DecompressedTooLarge):
        decode_batch(bb.bomb_batch(codec), max_decompressed_bytes=MiB)
    assert peak_rss_mib() - before < 32
    with pytest.raises(DecompressedTooLarge):
        decode_records(_bomb_chunk(codec))
    assert peak_rss_mib() - before < DEFAULT_BOUND_PEAK_MIB


@pytest.mark.parametrize("codec", CODECS)
def test_the_spark_column_decoder_fails_clearly_on_a_bomb(codec):
    pytest.importorskip("pyarrow")
    pytest.importorskip("numpy")
    from consumer_client.spark.arrow_records import decode_record_batch

    before = reset_peak_rss_mib()
    with pytest.raises(DecompressedTooLarge):
        decode_record_batch("t", 0, _bomb_chunk(codec), 0, 10, max_decompressed_bytes=MiB)
    assert peak_rss_mib() - before < 32
    with pytest.raises(DecompressedTooLarge):
        decode_record_batch("t", 0, _bomb_chunk(codec), 0, 10)
    assert peak_rss_mib() - before < DEFAULT_BOUND_PEAK_MIB


def test_decoders_still_read_every_codec():
    recs = [Record(b"k", b"v%d" % i, [("h", b"x")], 100 + i) for i in range(50)]
    for codec in [Compression.NONE, *CODECS]:
        data = build_batch(recs, compression=codec)
        assert [m.value for m in decode_chunk("t", 0, data, 0)] == [r.value for r in recs]
        assert [r.value for r in decode_batch(data)] == [r.value for r in recs]


def test_zlib_header_payloads_still_decompress():
    # wbits 47 accepts a zlib header as well as gzip's, as the decoder always did.
    assert decompress(Compression.GZIP, zlib.compress(b"zlib"), max_bytes=4) == b"zlib"


def test_gzip_members_are_read_in_turn_across_input_windows():
    """Concatenated members, some longer than the window zlib is fed at a time, decode to
    their concatenation (the member boundaries fall anywhere in a window)."""
    import gzip
    import os

    from broker_core.wire.compression import decompress
    from broker_core.wire.records import Compression

    parts = [os.urandom(150_000), b"x" * 10, b"", os.urandom(70_000), b"tail" * 1000]
    payload = b"".join(gzip.compress(p) for p in parts)
    assert decompress(Compression.GZIP, payload, max_bytes=1 << 20) == b"".join(parts)
    # trailing bytes that do not start a member are ignored, as before
    assert decompress(Compression.GZIP, payload + b"\0\0\0", max_bytes=1 << 20) == \
        b"".join(parts)


def test_gzip_with_too_many_members_is_refused_as_corrupt():
    import gzip

    from broker_core.wire.compression import MAX_GZIP_MEMBERS, decompress
    from broker_core.wire.records import Compression, CorruptRecordBatch

    empty = gzip.compress(b"")
    assert decompress(Compression.GZIP, empty * MAX_GZIP_MEMBERS, max_bytes=1024) == b""
    with pytest.raises(CorruptRecordBatch, match="more than 1024 members"):
        decompress(Compression.GZIP, empty * (MAX_GZIP_MEMBERS + 1), max_bytes=1024)
