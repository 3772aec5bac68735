"""Sample values for every wire schema, plus checks that the samples really exercise every field.

``populated(schema, version, flexible)`` builds a dict in which every field that exists at
``version`` holds a value different from its default (nested structs and arrays included), so a
round trip through the codec proves each field is written and read back. ``nulls=True`` puts
``None`` in every field that is nullable at that version instead. Other wire test modules import
these helpers.
"""

from __future__ import annotations

import pytest

from broker_core.wire.schema import (
    Array,
    Schema,
)
from tests.support.wire_samples import all_messages, populated


def _walk_fields(schema: Schema, value: dict, version: int, flexible: bool):
    for f in schema.fields:
        if not f.exists(version) or (f.tag is not None and not flexible):
            continue
        yield f, value[f.name]
        t = f.type
        if isinstance(t, Array) and isinstance(t.element, Schema):
            for item in value[f.name]:
                yield from _walk_fields(t.element, item, version, flexible)
        elif isinstance(t, Schema):
            yield from _walk_fields(t, value[f.name], version, flexible)


@pytest.mark.parametrize("msg,version", [(m, v) for _, m, v in all_messages()],
                         ids=[i for i, _, _ in all_messages()])
def test_samples_hold_a_non_default_value_in_every_field_of_the_version(msg, version):
    flexible = msg.is_flexible(version)
    value = populated(msg, version, flexible)
    seen = 0
    for f, v in _walk_fields(msg, value, version, flexible):
        assert not f.holds_default(v), f"{msg.name}.{f.name} v{version} sample is the default"
        seen += 1
    assert seen > 0 or not any(f.exists(version) for f in msg.fields)  # ApiVersions v0-2 is empty


@pytest.mark.parametrize("msg,version", [(m, v) for _, m, v in all_messages()],
                         ids=[i for i, _, _ in all_messages()])
def test_null_samples_put_none_exactly_in_the_nullable_fields(msg, version):
    flexible = msg.is_flexible(version)
    value = populated(msg, version, flexible, nulls=True)
    for f in msg.fields:
        if f.name in value:
            assert (value[f.name] is None) == f.nullable_in(version), f.name
