"""Small batches (at most ``SMALL_BATCH`` records: a ``linger.ms=0`` producer's one-record
batches) are read by the validator's lean loop from their first record instead of the
field-by-field parse and the runs. That path must refuse exactly what the other one refuses,
naming the same record with the same message and error code, and accept the same: every
single-byte change, cut and extension of one-, two- and eight-record batches of each shape,
and each hand-made malformed record, through both paths."""

from __future__ import annotations

import pytest

from broker_core.log import validator
from broker_core.log.validator import InvalidRecords, validate_batch
from broker_core.wire.records import parse_batch
from tests.support import bad_batches as bb

SHAPES = {
    "null key, 100 bytes": lambda i: bb.record(i, b"x" * 100),
    "keyed": lambda i: bb.record(i, b"value", key=b"key-%d" % i, ts_delta=3 * i),
    "two-byte lengths": lambda i: bb.record(i, b"y" * 200, key=b"k" * 130, ts_delta=-70),
    "null value, header": lambda i: bb.record(
        i, None, ts_delta=5000, headers=b"\x02" + bb.varint(2) + b"hk" + bb.varint(1) + b"v"),
    "two headers, null value in one": lambda i: bb.record(
        i, b"v", headers=b"\x04" + bb.varint(1) + b"a" + bb.varint(-1) + bb.varint(1) + b"b"
        + bb.varint(0)),
}
#: Replacement bytes for each position: the varint edges and a few others.
BYTES = (0x00, 0x01, 0x02, 0x03, 0x7E, 0x7F, 0x80, 0x81, 0xC3, 0xFE, 0xFF)


def outcome(raw: bytes, count: int, small: bool) -> tuple:
    """What ``_walk`` says of ``raw`` with the small-batch path on or off."""
    saved = validator.SMALL_BATCH
    validator.SMALL_BATCH = saved if small else 0
    try:
        return ("accepted", validator._walk(raw, count))
    except validator._Bad as e:
        return ("refused", e.index, e.message, e.code)
    except Exception as e:  # noqa: BLE001 - compared, not hidden: both paths must agree
        return ("raised", type(e).__name__, str(e))
    finally:
        validator.SMALL_BATCH = saved


def same(raw: bytes, count: int) -> tuple:
    fast = outcome(raw, count, small=True)
    assert fast == outcome(raw, count, small=False), (raw.hex(), count)
    assert fast[0] != "raised", fast
    return fast


def test_small_batch_covers_one_record():
    assert validator.SMALL_BATCH >= 1


@pytest.mark.parametrize("n", [1, 2, validator.SMALL_BATCH])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_byte_change_cut_and_extension_gets_the_same_answer(shape, n):
    raw = b"".join(SHAPES[shape](i) for i in range(n))
    assert same(raw, n)[0] == "accepted"
    refused = 0
    for at in range(len(raw)):
        for b in BYTES:
            if b == raw[at]:
                continue
            refused += same(raw[:at] + bytes([b]) + raw[at + 1:], n)[0] == "refused"
    for cut in range(len(raw)):
        assert same(raw[:cut], n)[0] == "refused"
    for extra in (b"\x00", b"\x0c\x00\x00" + bytes([2 * n]) + b"\x01\x01\x00" + b"\x00" * 5):
        assert same(raw + extra, n)[0] == "refused"
    for count in (n - 1, n + 1):
        if count >= 1:
            assert same(raw, count)[0] == "refused"
    assert refused >= 10 * n  # changes to the structure are refused, by both paths


@pytest.mark.parametrize("what, raw, code", [
    ("length overruns the batch", bb.varint(50) + b"\x00" * 10, "CORRUPT_MESSAGE"),
    ("length too small", bb.varint(2) + b"\x00\x00", "CORRUPT_MESSAGE"),
    ("negative length", bb.varint(-3), "CORRUPT_MESSAGE"),
    ("key length -2", bb.varint(6) + b"\x00\x00\x00" + bb.varint(-2) + b"\x00\x00",
     "CORRUPT_MESSAGE"),
    ("negative header count", bb.varint(6) + b"\x00\x00\x00\x01\x01" + bb.varint(-1),
     "CORRUPT_MESSAGE"),
    ("null header key", bb.varint(8) + b"\x00\x00\x00\x01\x01" + bb.varint(1)
     + bb.varint(-1) + bb.varint(-1), "INVALID_RECORD"),
    ("header key not UTF-8", bb.varint(9) + b"\x00\x00\x00\x01\x01" + bb.varint(1)
     + bb.varint(1) + b"\xff" + bb.varint(-1), "INVALID_RECORD"),
    ("offset delta 1", bb.record(1), "INVALID_RECORD"),
    ("timestamp varint of 11 bytes", bb.varint(16) + b"\x00" + b"\xff" * 11 + b"\x00\x02\x01\x01",
     "CORRUPT_MESSAGE"),
    ("offset delta varint of 6 bytes", bb.varint(11) + b"\x00\x00" + b"\x80" * 5 + b"\x00"
     + b"\x01\x01\x00", "CORRUPT_MESSAGE"),
])
def test_a_malformed_single_record_is_refused_and_named_by_both_paths(what, raw, code):
    assert same(raw, 1)[0] == "refused"
    data = bb.batch(raw, 1)
    with pytest.raises(InvalidRecords) as e:
        validate_batch(data, parse_batch(data), max_decompressed_bytes=bb.MiB)
    assert (e.value.error_code_name, e.value.record_index) == (code, 0), what
    assert outcome(raw, 1, small=True)[3] == code
