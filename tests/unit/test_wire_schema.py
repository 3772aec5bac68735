"""The schema DSL: defaults, version rules, nullability, tagged fields, Struct values, error
paths and the compiled per-version codecs."""

from __future__ import annotations

import uuid

import pytest

from broker_core.wire.errors import EncodeError, MalformedFrame
from broker_core.wire.primitives import Reader, Writer
from broker_core.wire.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UUID,
    Array,
    Field,
    Message,
    Schema,
    Struct,
    parse_versions,
)

POINT = Schema("Point", [Field("x", INT32, default=-1), Field("y", INT32, default=-1)])

DEMO = Message("Demo", versions="0-3", flexible="2+", fields=[
    Field("id", INT32),
    Field("count", INT16, default=-1),
    Field("name", STRING, nullable="1+"),                     # nullable only from v1
    Field("note", STRING, "1+", nullable="1+"),               # nullable everywhere: None
    Field("since_v1", INT64, "1+", default=-1),               # not ignorable
    Field("hint", INT32, "3+", ignorable=True),               # ignorable
    Field("topic_id", UUID, "3+", ignorable=True),
    Field("items", Array(Schema("Item", [
        Field("key", STRING),
        Field("values", Array(INT32)),
    ]))),
    Field("flags", Array(BOOL)),
    Field("data", RECORDS, nullable="0+"),
    Field("where", POINT, "2+", tag=0),
    Field("label", STRING, "2+", nullable="2+", tag=1),
    Field("enabled", BOOL, "3+", default=True),
])


def enc(value, version):
    return DEMO.to_bytes(value, version)


def dec(data, version):
    return DEMO.from_bytes(data, version)


def test_version_specs():
    assert parse_versions("3+") == (3, None)
    assert parse_versions("3-5") == (3, 5)
    assert parse_versions("3") == (3, 3)
    assert parse_versions(4) == (4, 4)
    assert parse_versions((2, None)) == (2, None)
    assert parse_versions("none") is None
    assert parse_versions(None) is None


def test_defaults_follow_kafka():
    d = DEMO.make()
    assert (d.id, d.count, d.name, d.note, d.since_v1) == (0, -1, "", None, -1)
    assert d.items == [] and d.flags == [] and d.data is None and d.enabled is True
    assert d.topic_id == uuid.UUID(int=0)
    assert d.where == POINT.make(x=-1, y=-1)
    assert d.label is None
    assert DEMO.make().items is not DEMO.make().items  # no shared mutable defaults


def test_struct_construction_equality_and_repr():
    a = DEMO.make(id=5, items=[{"key": "k", "values": [1, 2]}])
    b = DEMO.build({"id": 5, "items": [{"key": "k", "values": [1, 2]}]})
    assert a == b and isinstance(a.items[0], Struct)
    assert a != DEMO.make(id=6)
    assert repr(a).startswith("Demo(id=5, count=-1, name='', ")
    with pytest.raises(TypeError, match="no field 'nope'"):
        DEMO.make(nope=1)
    assert DEMO.make(data=b"x" * 100).__repr__().count("<100 bytes>") == 1
    assert a._asdict()["items"] == [{"key": "k", "values": [1, 2]}]


def test_dict_and_struct_encode_identically():
    value = {"id": 1, "name": "n", "items": [{"key": "a", "values": [3]}], "flags": [True]}
    for v in range(4):
        assert enc(value, v) == enc(DEMO.build(value), v)


def test_missing_fields_take_defaults_on_encode():
    assert dec(enc({}, 0), 0) == DEMO.make()


def test_fields_absent_from_the_version_decode_as_their_defaults():
    d = dec(enc({"id": 1}, 0), 0)
    assert d.since_v1 == -1 and d.note is None and d.where == POINT.make()


def test_non_default_value_in_a_missing_field_raises_naming_it():
    with pytest.raises(EncodeError, match="since_v1") as e:
        enc({"since_v1": 9}, 0)
    assert e.value.path[-1] == "since_v1"
    # ... also when the value comes in a struct decoded from a newer version
    newer = dec(enc({"since_v1": 9}, 1), 1)
    with pytest.raises(EncodeError, match="since_v1"):
        enc(newer, 0)


def test_missing_field_holding_its_default_is_skipped():
    assert enc({"since_v1": -1, "note": None, "enabled": True}, 0) == enc({}, 0)
    # None and empty mean the same "nothing" for a field the version lacks
    assert enc({"note": ""}, 0) == enc({}, 0)


def test_ignorable_fields_are_dropped_silently():
    assert enc({"hint": 42, "topic_id": uuid.uuid4()}, 2) == enc({}, 2)


def test_unknown_keys_are_refused():
    with pytest.raises(EncodeError, match="no field 'idd'"):
        enc({"idd": 1}, 1)


def test_nullability_follows_the_version():
    assert dec(enc({"name": None}, 1), 1).name is None
    with pytest.raises(EncodeError, match="name"):
        enc({"name": None}, 0)
    assert dec(enc({"data": None}, 0), 0).data is None
    assert dec(enc({"data": b""}, 0), 0).data == b""  # empty is not null


def test_wrong_types_raise_encode_errors_with_a_path():
    with pytest.raises(EncodeError) as e:
        enc({"items": [{"key": "a"}, {"key": 5}]}, 1)
    assert str(e.value) == "Demo v1.items[1].key: expected a string, got int"
    with pytest.raises(EncodeError, match="count"):
        enc({"count": 70000}, 0)
    with pytest.raises(EncodeError, match="items"):
        enc({"items": 5}, 0)
    with pytest.raises(EncodeError):
        DEMO.encode([], 0, Writer())
    with pytest.raises(EncodeError, match="no version 4"):
        enc({}, 4)


def test_flexible_versions_use_compact_forms():
    classic = enc({"name": "ab"}, 1)
    compact = enc({"name": "ab"}, 2)
    assert b"\x00\x02ab" in classic and b"\x03ab" in compact
    assert compact.endswith(b"\x00")  # the (empty) tagged-field section


def test_tagged_fields_are_written_only_when_not_default():
    plain = enc({}, 2)
    with_tags = enc({"where": {"x": 1}, "label": "L"}, 2)
    assert len(with_tags) > len(plain)
    d = dec(with_tags, 2)
    assert d.where == POINT.make(x=1, y=-1) and d.label == "L"
    assert enc({"where": {"x": -1, "y": -1}, "label": None}, 2) == plain


def test_unknown_tags_are_kept_and_written_back():
    base = enc({"id": 3}, 2)
    assert base.endswith(b"\x00")
    # Same body with a tagged field 9 the schema does not know (2 raw bytes).
    data = base[:-1] + b"\x01\x09\x02\xbe\xef"
    d = dec(data, 2)
    assert d._unknown_tags == {9: b"\xbe\xef"}
    assert d == dec(base, 2)  # unknown tags do not take part in equality
    assert enc(d, 2) == data


def test_tagged_field_with_bytes_left_over_is_malformed():
    base = enc({}, 2)
    # tag 0 ("where": two int32 and, being flexible, its own empty tag section = 9 bytes)
    # announced and given as 10 bytes: one too many.
    data = base[:-1] + b"\x01\x00\x0a" + b"\x00" * 8 + b"\x00" + b"\xee"
    with pytest.raises(MalformedFrame, match="extra bytes"):
        dec(data, 2)


def test_malformed_errors_name_the_field():
    data = enc({"items": [{"key": "abcdefghij", "values": [1, 2, 3]}]}, 1)
    cut = data[: data.index(b"abcdefghij") + 5]  # the key's bytes end early
    with pytest.raises(MalformedFrame) as e:
        dec(cut, 1)
    assert e.value.path[:2] == ("Demo v1", "items")
    assert "key" in str(e.value)


def test_trailing_bytes_are_malformed():
    with pytest.raises(MalformedFrame, match="bytes left"):
        dec(enc({}, 1) + b"\x00", 1)


def test_each_version_is_compiled_once():
    r1 = DEMO.codec(2, True)
    assert DEMO.codec(2, True) is r1
    assert DEMO._by_version[2] is r1


def test_records_decode_zero_copy_and_encode_from_chunks():
    frame = enc({"data": [b"ab", b"cd"]}, 1)
    d = DEMO.decode(Reader(frame), 1)
    assert isinstance(d.data, memoryview) and d.data == b"abcd" and d.data.obj is frame


def test_schema_declarations_are_checked():
    with pytest.raises(ValueError, match="duplicate field"):
        Schema("S", [Field("a", INT32), Field("a", INT32)])
    with pytest.raises(ValueError, match="cannot be nullable"):
        Field("a", INT32, nullable="0+")
    with pytest.raises(ValueError, match="not all flexible"):
        Message("M", versions="0-3", flexible="2+", fields=[Field("t", INT32, "0+", tag=0)])
    with pytest.raises(ValueError, match="closed version range"):
        Message("M", versions="0+", fields=[])


# -- pre-encoded arrays (Metadata's partitions, reused until they change) -------------------------


def test_a_pre_encoded_array_is_written_exactly_as_the_value_would_be():
    from broker_core.wire.messages import metadata
    from broker_core.wire.schema import Encoded

    parts_type = metadata.RESPONSE.field_map["topics"].type.element.field_map["partitions"].type
    parts = [{"error_code": 0, "partition_index": i, "leader_id": 1, "leader_epoch": 3,
              "replica_nodes": [1, 2, 3], "isr_nodes": [1, 2], "offline_replicas": [3]}
             for i in range(5)]
    for version in metadata.RESPONSE.versions():
        flexible = metadata.RESPONSE.is_flexible(version)
        body = {"brokers": [{"node_id": 1, "host": "h", "port": 1}], "controller_id": 1,
                "topics": [{"name": "t", "partitions": parts}]}
        plain = metadata.RESPONSE.to_bytes(body, version)
        enc = parts_type.pre_encode(parts, version, flexible)
        assert isinstance(enc, Encoded)
        body["topics"][0]["partitions"] = enc
        assert metadata.RESPONSE.to_bytes(body, version) == plain, version
        # A struct built around it (coerce keeps it) encodes the same.
        assert metadata.RESPONSE.to_bytes(metadata.RESPONSE.build(body), version) == plain


def test_a_pre_encoded_array_is_refused_at_another_version_or_place():
    from broker_core.wire.messages import metadata

    topics_type = metadata.RESPONSE.field_map["topics"].type
    parts_type = topics_type.element.field_map["partitions"].type
    enc = parts_type.pre_encode([], 9, True)
    body = {"topics": [{"name": "t", "partitions": enc}]}
    with pytest.raises(EncodeError, match="cannot be written"):
        metadata.RESPONSE.to_bytes(body, 8)
    with pytest.raises(EncodeError, match="cannot be written"):
        metadata.RESPONSE.to_bytes({"brokers": enc}, 9)
