"""Reader/Writer: round trips, Kafka's exact encodings, edge cases, and bad input that must
raise MalformedFrame (never IndexError, struct.error or UnicodeDecodeError)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.wire.errors import EncodeError, MalformedFrame
from broker_core.wire.primitives import (
    MAX_STRING_BYTES,
    ZERO_COPY_MIN_BYTES,
    Reader,
    Writer,
    append_uvarint,
    append_zigzag,
    read_varint,
    zigzag_bytes,
)


def written(fn, *args) -> bytes:
    w = Writer()
    getattr(w, fn)(*args)
    return w.tobytes()


def read(fn, data: bytes, *args):
    r = Reader(data)
    v = getattr(r, fn)(*args)
    assert r.remaining() == 0, "reader did not consume exactly the encoding"
    return v


@pytest.mark.parametrize("fn,value,data", [
    ("int8", -128, b"\x80"),
    ("int16", -2, b"\xff\xfe"),
    ("int32", 0x7FFFFFFF, b"\x7f\xff\xff\xff"),
    ("int64", -(2**63), b"\x80" + b"\x00" * 7),
    ("uint16", 0xFFFF, b"\xff\xff"),
    ("uint32", 0xFFFFFFFF, b"\xff\xff\xff\xff"),
    ("float64", 1.0, b"\x3f\xf0" + b"\x00" * 6),
    ("boolean", True, b"\x01"),
    ("boolean", False, b"\x00"),
])
def test_fixed_width_values_are_big_endian(fn, value, data):
    assert written(fn, value) == data
    assert read(fn, data) == value


def test_any_non_zero_byte_reads_as_true():
    assert read("boolean", b"\x02") is True


@pytest.mark.parametrize("value,data", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f"),
])
def test_unsigned_varint_known_encodings(value, data):
    assert written("uvarint", value) == data
    assert read("uvarint", data) == value


@pytest.mark.parametrize("value,data", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_zigzag_varint_known_encodings(value, data):
    assert written("varint", value) == data
    assert read("varint", data) == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(v):
    assert read("varlong", written("varlong", v)) == v


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(v):
    assert read("varint", written("varint", v)) == v


@pytest.mark.parametrize("fn,value", [
    ("uvarint", -1), ("uvarint", 2**32), ("varint", 2**31), ("varlong", -(2**63) - 1)])
def test_varints_out_of_range_refuse_to_encode(fn, value):
    with pytest.raises(EncodeError):
        written(fn, value)


@pytest.mark.parametrize("fn,data", [
    ("uvarint", b""),                          # nothing
    ("uvarint", b"\x80\x80"),                  # continuation bit, then the end
    ("uvarint", b"\xff\xff\xff\xff\xff\x01"),  # six bytes: longer than any 32-bit varint
    ("uvarint", b"\xff\xff\xff\xff\x7f"),      # five bytes but above 2**32 - 1
    ("varlong", b"\xff" * 10 + b"\x01"),       # eleven bytes
])
def test_bad_varints_are_malformed(fn, data):
    with pytest.raises(MalformedFrame):
        Reader(data).__getattribute__(fn)()


@pytest.mark.parametrize("fn,value,data", [
    ("string", "h\u00e9", b"\x00\x03h\xc3\xa9"),        # length counts UTF-8 bytes
    ("nullable_string", None, b"\xff\xff"),
    ("nullable_string", "", b"\x00\x00"),
    ("compact_string", "ab", b"\x03ab"),                 # length + 1
    ("compact_nullable_string", None, b"\x00"),
    ("compact_nullable_string", "", b"\x01"),
    ("bytes_", b"\x00\x01", b"\x00\x00\x00\x02\x00\x01"),
    ("nullable_bytes", None, b"\xff\xff\xff\xff"),
    ("compact_bytes", b"z", b"\x02z"),
    ("compact_nullable_bytes", None, b"\x00"),
])
def test_strings_and_bytes_known_encodings(fn, value, data):
    assert written(fn, value) == data
    assert read(fn, data) == value


@pytest.mark.parametrize("fn,data", [
    ("string", b"\x00\x05abc"),          # length beyond the data
    ("string", b"\xff\xff"),             # null in a non-nullable string
    ("nullable_string", b"\xff\xfe"),    # -2 is no valid length
    ("string", b"\x00\x02\xc3\x28"),     # invalid UTF-8
    ("compact_string", b"\x00"),         # null in a non-nullable compact string
    ("compact_string", b"\xff\xff\x03"),  # compact length above the int16 limit
    ("bytes_", b"\x00\x00\x00\x09abc"),
    ("nullable_bytes", b"\xff\xff\xff\xfe"),
    ("compact_bytes", b"\x05ab"),
    ("records", b"\x00\x00\x01\x00"),
    ("uuid", b"\x00" * 15),
    ("int64", b"\x00" * 7),
])
def test_bad_lengths_and_contents_are_malformed(fn, data):
    with pytest.raises(MalformedFrame):
        getattr(Reader(data), fn)()


def test_strings_longer_than_the_int16_limit_refuse_to_encode():
    with pytest.raises(EncodeError):
        written("string", "x" * (MAX_STRING_BYTES + 1))
    with pytest.raises(EncodeError):
        written("compact_string", "x" * (MAX_STRING_BYTES + 1))


def test_records_are_zero_copy_views_and_may_be_null():
    frame = b"\x00\x00\x00\x03abc\xff\xff\xff\xff\x04xyz\x00"
    r = Reader(frame)
    v = r.records()
    assert isinstance(v, memoryview) and v == b"abc" and v.obj is frame
    assert r.records() is None
    assert r.compact_records() == b"xyz"
    assert r.compact_records() is None
    assert r.remaining() == 0


def test_uuid_round_trip():
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert written("uuid", u) == u.bytes
    assert read("uuid", u.bytes) == u
    assert written("uuid", None) == b"\x00" * 16


def test_array_counts_are_checked_against_the_bytes_left():
    assert Reader(b"\xff\xff\xff\xff").array_length() is None
    assert Reader(b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02").array_length(4) == 2
    with pytest.raises(MalformedFrame):  # 2 billion elements in 4 bytes
        Reader(b"\x7f\xff\xff\xff\x00\x00\x00\x00").array_length(4)
    with pytest.raises(MalformedFrame):
        Reader(b"\xff\xff\xff\xfe").array_length()
    assert Reader(b"\x00").compact_array_length() is None
    with pytest.raises(MalformedFrame):
        Reader(b"\x05\x00").compact_array_length()


def test_tagged_field_sections():
    w = Writer()
    w.tagged_fields({5: b"\x01\x02", 1: b""})  # written in tag order
    data = w.tobytes()
    assert data == b"\x02\x01\x00\x05\x02\x01\x02"
    assert {k: bytes(v) for k, v in Reader(data).tagged_fields().items()} == {
        1: b"", 5: b"\x01\x02"}
    r = Reader(data + b"rest")
    r.skip_tagged_fields()
    assert bytes(r.buf[r.pos:]) == b"rest"
    with pytest.raises(MalformedFrame):  # tag 1 claims 9 bytes, 1 is left
        Reader(b"\x01\x01\x09\x00").tagged_fields()


def test_writer_keeps_large_payloads_as_their_own_chunk():
    big = b"b" * ZERO_COPY_MIN_BYTES
    small = b"s" * 10
    w = Writer()
    w.int32(1)
    w.raw(big)
    w.raw(small)
    w.int16(2)
    chunks = w.chunks()
    assert chunks[1] is big  # not copied
    assert b"".join(chunks) == b"\x00\x00\x00\x01" + big + small + b"\x00\x02"
    assert len(w) == len(b"".join(chunks))


def test_reader_respects_its_end_bound():
    r = Reader(b"\x00\x01\x00\x02", 0, 2)
    assert r.int16() == 1
    with pytest.raises(MalformedFrame):
        r.int16()


# -- the module-level varint functions every record codec shares ---------------------------------


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_functions_round_trip_and_agree_with_the_writer(v):
    data = zigzag_bytes(v)
    out = bytearray(b"x")
    append_zigzag(out, v)
    assert bytes(out[1:]) == data
    assert read_varint(data, 0, len(data)) == (v, len(data))
    if -(2**31) <= v < 2**31:
        assert data == written("varint", v)
    assert data == written("varlong", v)


@given(st.integers(0, 2**64 - 1))
def test_unsigned_varints_round_trip(v):
    out = bytearray()
    append_uvarint(out, v)
    assert read_varint(bytes(out) + b"\xff", 0, len(out), 10, "n", False) == (v, len(out))


def test_read_varint_stops_at_its_end_and_names_the_field():
    data = b"\x80\x80\x01"
    with pytest.raises(MalformedFrame, match="^truncated key length$"):
        read_varint(data, 0, 2, 10, "key length")  # the terminating byte lies past `end`
    with pytest.raises(MalformedFrame, match="^key length is longer than 2 bytes$"):
        read_varint(data, 0, 3, 2, "key length")
    assert read_varint(b"\x00" + data, 1, 4, 3) == (1 << 13, 4)  # zig-zag of 2 ** 14
