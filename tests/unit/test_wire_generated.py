"""The generated codec (straight-line code per message version, ``schema._generate``) behaves
exactly as the step-walking codec it replaced (``tests/support/wire_reference.py``): for every
served API, version, request and response, the same bytes from the same values (every field
set, every nullable field null, everything at its default, unknown tagged fields kept), equal
structs from the same bytes, and the same errors at the same field paths for truncated frames
and bad values. Absent fields' mutable defaults are fresh copies in every decoded struct."""

from __future__ import annotations

import pytest

from broker_core.wire.errors import EncodeError, MalformedFrame
from broker_core.wire.primitives import Writer
from tests.support.wire_reference import reference_decode, reference_encode
from tests.support.wire_samples import all_messages, populated

MESSAGES = all_messages()
IDS = [i for i, _, _ in MESSAGES]
PARAMS = [(m, v) for _, m, v in MESSAGES]


def same_struct(a, b) -> bool:
    """Equal values, equal unknown tagged fields, and the same field order in repr."""
    return (a == b and repr(a) == repr(b)
            and getattr(a, "_unknown_tags", None) == getattr(b, "_unknown_tags", None))


@pytest.mark.parametrize("sample", ["values", "nulls", "defaults"])
@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_generated_codec_matches_the_reference(msg, version, sample):
    flexible = msg.is_flexible(version)
    value = {} if sample == "defaults" else populated(msg, version, flexible,
                                                      nulls=sample == "nulls")
    data = msg.to_bytes(value, version)
    assert data == reference_encode(msg, value, version)
    decoded = msg.from_bytes(data, version)
    assert same_struct(decoded, reference_decode(msg, data, version))
    # A decoded struct (every field present, absent ones at their defaults) encodes the same.
    assert msg.to_bytes(decoded, version) == reference_encode(msg, decoded, version) == data


def _with_unknown_tag(data: bytes) -> bytes:
    """``data`` (a flexible body whose top-level tagged section is empty and last) with an
    unknown tag 90 of three bytes added."""
    assert data[-1] == 0
    return data[:-1] + bytes([1, 90, 3, 7, 8, 9])


@pytest.mark.parametrize("msg,version", [(m, v) for m, v in PARAMS if m.is_flexible(v)],
                         ids=[i for i, m, v in MESSAGES if m.is_flexible(v)])
def test_unknown_tagged_fields_are_kept_and_written_back_the_same(msg, version):
    data = msg.to_bytes({}, version)
    if data[-1] != 0:
        pytest.skip("the body does not end with its own tagged section")
    tagged = _with_unknown_tag(data)
    decoded = msg.from_bytes(tagged, version)
    assert decoded._unknown_tags == {90: b"\x07\x08\x09"}
    assert same_struct(decoded, reference_decode(msg, tagged, version))
    assert msg.to_bytes(decoded, version) == reference_encode(msg, decoded, version) == tagged


def _error(fn, *args) -> tuple[type, str]:
    try:
        fn(*args)
    except (MalformedFrame, EncodeError) as e:
        return type(e), str(e)
    return type(None), ""


@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_truncated_frames_fail_the_same_way(msg, version):
    data = msg.to_bytes(populated(msg, version, msg.is_flexible(version)), version)
    step = max(1, len(data) // 60)  # about sixty cuts per message, always including the last
    for cut in sorted({*range(0, len(data), step), len(data) - 1} - {-1}):
        got = _error(msg.from_bytes, data[:cut], version)
        assert got[0] is MalformedFrame, (cut, got)
        assert got == _error(reference_decode, msg, data[:cut], version), cut


BAD_VALUES = [object(), "text", -(2**70), None, [object()], {"no_such_field": 1}]


@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_bad_values_fail_the_same_way(msg, version):
    value = populated(msg, version, msg.is_flexible(version))
    for name in list(value):
        for bad in BAD_VALUES:
            broken = {**value, name: bad}
            got = _error(msg.to_bytes, broken, version)
            assert got == _error(reference_encode, msg, broken, version), (name, bad)
    assert _error(msg.to_bytes, {**value, "not_a_field": 1}, version) == _error(
        reference_encode, msg, {**value, "not_a_field": 1}, version)


def test_absent_mutable_defaults_are_fresh_in_every_decoded_struct():
    from broker_core.wire.messages import fetch

    # Fetch v12+ has tagged struct fields (current_leader) and list fields per partition.
    version = fetch.RESPONSE.max_version
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]}
    data = fetch.RESPONSE.to_bytes(body, version)
    a = fetch.RESPONSE.from_bytes(data, version).responses[0].partitions[0]
    b = fetch.RESPONSE.from_bytes(data, version).responses[0].partitions[0]
    field = fetch.RESPONSE.field_map["responses"].type.element.field_map["partitions"] \
        .type.element.field_map["current_leader"]
    assert a.current_leader == b.current_leader == field.default
    assert a.current_leader is not b.current_leader
    assert a.current_leader is not field.default
    a.current_leader.leader_id = 5
    assert b.current_leader.leader_id != 5 and field.default.leader_id != 5

    # A list field the version does not have (LeaderAndIsr v5 has no ungrouped states).
    from broker_core.wire.messages import leader_and_isr

    msg = leader_and_isr.REQUEST
    data = msg.to_bytes({}, 5)
    x, y = msg.from_bytes(data, 5), msg.from_bytes(data, 5)
    assert x.ungrouped_partition_states == [] and \
        x.ungrouped_partition_states is not y.ungrouped_partition_states
    x.ungrouped_partition_states.append(1)
    assert y.ungrouped_partition_states == [] and \
        msg.field_map["ungrouped_partition_states"].default == []


def test_generated_source_is_kept_for_debugging():
    from broker_core.wire.messages import metadata

    codec = metadata.RESPONSE.codec(12, True)
    assert "def decode(r):" in codec.decode.__source__
    assert "def encode(w, obj):" in codec.encode.__source__
    w = Writer()
    codec.encode(w, {})
    assert w.tobytes() == metadata.RESPONSE.to_bytes({}, 12)


@pytest.mark.parametrize("version", [5, 8, 9, 12])  # classic (int32 lengths) and flexible
@pytest.mark.parametrize("length", [0, 1, 3, 31, 32, 33, 200])
def test_number_arrays_short_and_long_match_the_reference(version, length):
    """Arrays of numbers shorter than SMALL_ARRAY take an inline path; longer ones the type's
    reader and writer. Both give the reference's bytes, values and errors."""
    from broker_core.wire.messages import metadata
    from broker_core.wire.schema import SMALL_ARRAY

    assert 0 < SMALL_ARRAY < 200
    msg = metadata.RESPONSE
    ids = list(range(length))

    def body(isr):
        return {"topics": [{"name": "t", "partitions": [
            {"partition_index": 1, "replica_nodes": ids[::-1], "isr_nodes": isr,
             "offline_replicas": ids[:2]}]}]}

    data = msg.to_bytes(body(ids), version)
    assert data == reference_encode(msg, body(ids), version)
    assert same_struct(msg.from_bytes(data, version), reference_decode(msg, data, version))
    for cut in range(max(0, len(data) - 8 * length - 24), len(data)):
        assert _error(msg.from_bytes, data[:cut], version) == \
            _error(reference_decode, msg, data[:cut], version)
    if length:
        bad = body([*ids[:-1], 2**40])
        got = _error(msg.to_bytes, bad, version)
        assert got[0] is EncodeError and got == _error(reference_encode, msg, bad, version)


# -- the short paths: strings, struct arrays and record data read and written inline ----------
#
# Produce and Fetch (every version, classic and flexible) around each limit of the inline paths:
# one-byte compact lengths (under 127), the two-byte compact record length (under 16 KiB), the
# classic int16/int32 lengths; the reference gives the bytes, values and errors.

def _produce_and_fetch():
    from broker_core.wire.messages import fetch, produce

    return [(m, v) for m in (produce.REQUEST, produce.RESPONSE, fetch.REQUEST, fetch.RESPONSE)
            for v in m.versions()]


SHORT_PATHS = _produce_and_fetch()
SHORT_IDS = [f"{m.name}-v{v}" for m, v in SHORT_PATHS]
NAMES = ["", "t", "a" * 126, "a" * 127, "a" * 128, "é" * 63, "é" * 64, "ü" * 200, "x" * 300]
RECORD_SIZES = [0, 1, 126, 127, 128, 16382, 16383, 16384, 20000]


def _body(msg, name, records=b"", partitions=1, transactional_id=None):
    parts = list(range(partitions))
    if msg.name == "ProduceRequest":
        return {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5,
                "topic_data": [{"name": name, "partition_data": [
                    {"index": i, "records": records} for i in parts]}]}
    if msg.name == "ProduceResponse":
        return {"responses": [{"name": name, "partition_responses": [
            {"index": i, "base_offset": 7, "error_message": transactional_id}
            for i in parts]}]}
    if msg.name == "FetchRequest":
        return {"topics": [{"topic": name, "partitions": [
            {"partition": i, "fetch_offset": 3, "partition_max_bytes": 9} for i in parts]}],
            "rack_id": name}
    return {"responses": [{"topic": name, "partitions": [
        {"partition_index": i, "records": records} for i in parts]}]}


def _same_everywhere(msg, version, body, cuts=()):
    data = msg.to_bytes(body, version)
    assert data == reference_encode(msg, body, version)
    assert same_struct(msg.from_bytes(data, version), reference_decode(msg, data, version))
    for cut in cuts:
        if 0 <= cut < len(data):
            assert _error(msg.from_bytes, data[:cut], version) == \
                _error(reference_decode, msg, data[:cut], version), cut
    return data


@pytest.mark.parametrize("msg,version", SHORT_PATHS, ids=SHORT_IDS)
def test_short_paths_match_the_reference_at_every_limit(msg, version):
    for name in NAMES:
        data = _same_everywhere(msg, version, _body(msg, name, transactional_id=name),
                                cuts=range(0, 48))
        assert len(data) > 0
    for size in RECORD_SIZES:
        records = bytes(range(256)) * (size // 256) + bytes(size % 256)
        data = _same_everywhere(msg, version, _body(msg, "t", records))
        cuts = range(len(data) - size - 8, len(data) - size + 4)
        _same_everywhere(msg, version, _body(msg, "t", records), cuts=cuts)
        # Followed by more partitions: a misread length would still find bytes to take.
        _same_everywhere(msg, version, _body(msg, "t", records, partitions=3))
    for n in (0, 2, 126, 127, 128):
        _same_everywhere(msg, version, _body(msg, "t", partitions=n), cuts=range(0, 40))
    _same_everywhere(msg, version, _body(msg, "t", records=None))


@pytest.mark.parametrize("msg,version", SHORT_PATHS, ids=SHORT_IDS)
def test_short_paths_refuse_bad_frames_as_the_reference_does(msg, version):
    """Bad UTF-8, a null where none may be, lying and non-canonical lengths: the same error
    (or the same value, for a non-canonical length the reference accepts)."""
    data = msg.to_bytes(_body(msg, "abc", b"\x01\x02\x03"), version)
    at = data.index(b"abc")
    tampered = [
        data[:at] + b"\xff\xfe\xfd" + data[at + 3:],  # not UTF-8
        data[:at] + b"ab\xc3" + data[at + 3:],  # cut inside a character
    ]
    flexible = msg.is_flexible(version)
    if flexible:
        tampered += [
            data[:at - 1] + b"\x00" + data[at:],  # a null name
            data[:at - 1] + b"\x84\x00" + data[at:],  # a non-canonical two-byte length (4)
            data[:at - 1] + b"\x7f" + data[at:],  # a length past the end
            data[:at - 1] + b"\xff\xff\xff\xff\x0f" + data[at:],  # the largest length
        ]
        rec = data.find(b"\x01\x02\x03")
        tampered += [] if rec < 0 else [
            data[:rec - 1] + b"\x84\x00" + data[rec:],  # a non-canonical records length
            data[:rec - 1] + b"\xff\x7f" + data[rec:],  # 16 KiB claimed, 3 bytes there
            data[:rec - 1] + b"\x00" + data[rec:],  # null records
        ]
    else:
        tampered += [
            data[:at - 2] + b"\xff\xff" + data[at:],  # a null name
            data[:at - 2] + b"\xff\xfe" + data[at:],  # a negative length
            data[:at - 2] + b"\x00\x7f" + data[at:],  # a length past the end
        ]
        rec = data.find(b"\x01\x02\x03")
        tampered += [] if rec < 0 else [
            data[:rec - 4] + b"\xff\xff\xff\xff" + data[rec:],  # null records
            data[:rec - 4] + b"\xff\xff\xff\xfe" + data[rec:],  # a negative length
            data[:rec - 4] + b"\x00\x00\x40\x00" + data[rec:],  # a length past the end
        ]
    for bad in tampered:
        got = _error(msg.from_bytes, bad, version)
        want = _error(reference_decode, msg, bad, version)
        assert got == want, bad
        if got[0] is type(None):
            assert same_struct(msg.from_bytes(bad, version),
                               reference_decode(msg, bad, version))


@pytest.mark.parametrize("msg,version", SHORT_PATHS, ids=SHORT_IDS)
def test_short_paths_refuse_bad_values_as_the_reference_does(msg, version):
    for name in [b"abc", None, "\ud800", 5, "x" * 40000]:
        body = _body(msg, name)
        assert _error(msg.to_bytes, body, version) == _error(reference_encode, msg, body,
                                                             version), name
    body = _body(msg, "t", partitions=3)
    top = next(iter(k for k in body if isinstance(body[k], list)))
    inner = next(k for k in body[top][0] if isinstance(body[top][0][k], list))
    for bad in [None, "x", {"no_such_field": 1}, object()]:
        broken = {**body, top: [{**body[top][0], inner: [*body[top][0][inner][:2], bad]}]}
        got = _error(msg.to_bytes, broken, version)
        assert got == _error(reference_encode, msg, broken, version), bad
