"""A populated sample of every message at every version the codec serves, for round-trip and
fuzz tests.
"""

from __future__ import annotations

import itertools
import uuid

from broker_core.wire import apis
from broker_core.wire.schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UINT32,
    UUID,
    Array,
    Field,
    Message,
    Schema,
)

_INT_TOP = {INT8: 120, INT16: 32000, INT32: 2_000_000_000, INT64: 2**62, UINT16: 65000,
            UINT32: 4_000_000_000}


def _scalar(f: Field, k: int) -> object:
    t = f.type
    if t in _INT_TOP:
        return _INT_TOP[t] - k  # far from every Kafka default (0, -1, 60000, ...)
    if t is BOOL:
        return not f.default
    if t is FLOAT64:
        return 1.5 + k
    if t is STRING:
        return f"{f.name}-{k}-\u00e9\u6f22"  # non-ASCII on purpose: lengths are in bytes
    if t is BYTES:
        return bytes([k % 256, 1, 2, 3])
    if t is RECORDS:
        # Alternate small and large payloads: large ones take the writer's zero-copy path.
        return bytes(range(256)) * (5 if k % 2 else 1)
    if t is UUID:
        return uuid.UUID(int=(k + 1) * 0x1234567)
    raise AssertionError(f"no sample for {t}")


def populated(schema: Schema, version: int, flexible: bool, *, nulls: bool = False,
              counter: itertools.count | None = None) -> dict:
    """A dict for ``schema`` at ``version`` (see the module docstring)."""
    counter = counter or itertools.count(1)
    out: dict = {}
    for f in schema.fields:
        if not f.exists(version):
            continue
        if f.tag is not None and f.is_tagged(version) and not flexible:
            continue
        out[f.name] = _value(f, version, flexible, nulls, counter)
    return out


def _value(f: Field, version: int, flexible: bool, nulls: bool, counter: itertools.count):
    if nulls and f.nullable_in(version):
        return None
    k = next(counter)
    t = f.type
    if isinstance(t, Array):
        el = t.element
        if isinstance(el, Schema):
            return [populated(el, version, flexible, nulls=nulls, counter=counter)
                    for _ in range(2)]
        probe = Field(f.name, el)
        return [_scalar(probe, k), _scalar(probe, k + 1)]
    if isinstance(t, Schema):
        return populated(t, version, flexible, nulls=nulls, counter=counter)
    return _scalar(f, k)


def all_messages() -> list[tuple[str, Message, int]]:
    """``(id, message, version)`` for the request and response of every served API version."""
    out = []
    for key, spec in sorted(apis.SUPPORTED.items()):
        for v in range(spec.min_version, spec.max_version + 1):
            out.append((f"{key.name}-req-v{v}", spec.request, v))
            out.append((f"{key.name}-resp-v{v}", spec.response, v))
    return out


