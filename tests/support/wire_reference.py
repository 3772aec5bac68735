"""The wire codec's reference implementation: the step-walking compiler that
:mod:`broker_core.wire.schema` used before it generated straight-line code per message version.

The generated codec must encode every value to the same bytes, decode every frame to equal
structs, and refuse bad input with the same errors at the same field paths. ``reference(msg)``
gives a stand-in for a message whose ``decode``/``encode`` run this implementation (its nested
structs included), so tests can compare the two on the same inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from broker_core.wire.errors import EncodeError, MalformedFrame
from broker_core.wire.primitives import Reader, Writer
from broker_core.wire.schema import (
    Field,
    Schema,
    Struct,
    WriteFn,
    _Codec,
    _read_tagged,
    _runs,
    _short_repr,
    _write_tagged,
)


def _fixed_reader(st: struct.Struct) -> Callable[[Reader], tuple]:
    return lambda r: r.fixed(st)


def _fixed_writer(st: struct.Struct, run: list[Field], version: int
                  ) -> Callable[[Writer, dict], None]:
    pairs = tuple((f.name, f.default) for f in run)

    def write(w: Writer, d: dict) -> None:
        try:
            w.fixed(st, [d.get(n, dv) for n, dv in pairs])
        except struct.error:
            # Name the culprit rather than the whole run.
            for f in run:
                v = d.get(f.name, f.default)
                try:
                    struct.pack(">" + f.type.fixed, v)  # type: ignore[operator]
                except struct.error as e:
                    raise EncodeError(f"{_short_repr(v)} is not a valid {f.type.name} ({e})",
                                      (f.name,)) from None
            raise

    return write


def _var_writer(f: Field, write_value: WriteFn) -> Callable[[Writer, dict], None]:
    name = f.name
    dflt = f._enc_default
    return lambda w, d: write_value(w, d.get(name, dflt))


def compile_reference(self: Schema, version: int, flexible: bool) -> _Codec:
    """The codec as Sluice built it before the generated one: a list of steps walked per
    value. Tests compare the generated codec with it, byte for byte and error for error."""
    name = self.name
    cls = self.cls
    new = object.__new__
    present = [f for f in self.fields if f.exists(version) and not f.is_tagged(version)]
    tagged = sorted((f for f in self.fields if flexible and f.exists(version)
                     and f.is_tagged(version)), key=lambda f: f.tag)
    absent = [f for f in self.fields if f not in present and f not in tagged]
    min_size = sum(f.type.min_size(version, flexible) for f in present) + (1 if flexible else 0)

    # Decode steps: (name, read function, is_group). A run of fixed-width fields is one
    # struct.unpack; its "name" is the tuple of field names.
    dec_steps: list[tuple[Any, Callable, bool]] = []
    enc_steps: list[tuple[str, Callable[[Writer, dict], None]]] = []
    for run in _runs(present):
        if run[0].type.fixed is not None:
            names = tuple(f.name for f in run)
            st = struct.Struct(">" + "".join(f.type.fixed for f in run))  # type: ignore[misc]
            dec_steps.append((names, _fixed_reader(st), True))
            # The run's writer names the failing field itself (a run has no single name).
            enc_steps.append(("", _fixed_writer(st, run, version)))
        else:
            f = run[0]
            nullable = f.nullable_in(version)
            dec_steps.append((f.name, f.type.reader(version, flexible, nullable), False))
            enc_steps.append((f.name, _var_writer(f, f.type.writer(version, flexible,
                                                                     nullable))))

    static_absent = {f.name: f.default for f in absent
                     if not isinstance(f.default, list | Struct)}
    factory_absent = [f for f in absent if isinstance(f.default, list | Struct)]
    tag_fields = {f.tag: (f.name, f.type.reader(version, True, f.nullable_in(version)))
                  for f in tagged}
    tag_defaults = list(tagged)

    def decode(r: Reader) -> Struct:
        d: dict[str, Any] = {}
        step: Any = name
        try:
            for step, read, group in dec_steps:
                if group:
                    d.update(zip(step, read(r), strict=False))
                else:
                    d[step] = read(r)
            if flexible:
                step = "<tagged fields>"
                for f in tag_defaults:
                    d[f.name] = f.fresh_default()
                unknown = _read_tagged(r, tag_fields, d)
                if unknown:
                    d["_unknown_tags"] = unknown
        except MalformedFrame as e:
            raise e.at(step if isinstance(step, str) else ",".join(step)) from None
        if static_absent:
            d.update(static_absent)
        for f in factory_absent:
            d[f.name] = f.fresh_default()
        obj = new(cls)
        obj.__dict__ = d
        return obj

    present_names = frozenset(f.name for f in present) | {f.name for f in tagged}
    tag_writers = [(f, f.type.writer(version, True, f.nullable_in(version))) for f in tagged]

    field_map = self.field_map

    def check_absent(f: Field, v: Any) -> None:
        if f.ignorable or v is f.default or f.holds_default(v):
            return
        raise EncodeError(f"{_short_repr(v)} cannot be sent at version {version}, which "
                          f"has no such field (and Kafka does not mark it ignorable)",
                          (f.name,))

    def check_dict_keys(d: dict) -> None:
        for k, v in d.items():
            if k in present_names or k == "_unknown_tags":
                continue
            f = field_map.get(k)
            if f is None:
                raise EncodeError(f"{name} has no field {k!r}")
            check_absent(f, v)

    def encode(w: Writer, obj: Any) -> None:
        if type(obj) is dict:
            d = obj
            if not present_names.issuperset(d):
                check_dict_keys(d)
        elif isinstance(obj, Struct):
            if obj._schema is not self:
                raise EncodeError(f"expected {name}, got {type(obj).__name__}")
            d = obj.__dict__
            for f in absent:
                check_absent(f, d[f.name])
        else:
            raise EncodeError(f"expected a dict or {name}, got {type(obj).__name__}")
        step = name
        try:
            for step, write in enc_steps:  # noqa: B007 (step names the field on error)
                write(w, d)
            if flexible:
                step = "<tagged fields>"
                _write_tagged(w, tag_writers, d)
        except EncodeError as e:
            raise (e.at(step) if step else e) from None
        except (struct.error, TypeError, ValueError, OverflowError, AttributeError) as e:
            raise EncodeError(f"bad value: {e}", (step,) if step else ()) from None

    return _Codec(decode, encode, min_size)




_codecs: dict[tuple[int, int, bool], _Codec] = {}


def _reference_codec(self: Schema, version: int, flexible: bool) -> _Codec:
    key = (id(self), version, flexible)
    c = _codecs.get(key)
    if c is None:
        c = _codecs[key] = compile_reference(self, version, flexible)
    return c


def reference_codec(schema: Schema, version: int, flexible: bool) -> _Codec:
    """The reference codec of ``schema`` at (``version``, ``flexible``), nested structs
    included: while it is built, every schema's ``codec`` is the reference one, so the closures
    it binds for nested arrays and structs are reference closures too."""
    original = Schema.codec
    Schema.codec = _reference_codec  # type: ignore[method-assign]
    try:
        return _reference_codec(schema, version, flexible)
    finally:
        Schema.codec = original  # type: ignore[method-assign]


def reference_decode(msg: Any, data: bytes, version: int) -> Struct:
    """``msg.from_bytes(data, version)`` through the reference codec (same error wrapping)."""
    c = reference_codec(msg, version, msg.is_flexible(version))
    r = Reader(data)
    try:
        body = c.decode(r)
    except MalformedFrame as e:
        raise e.at(f"{msg.name} v{version}") from None
    except (struct.error, ValueError, OverflowError, IndexError) as e:
        raise MalformedFrame(f"{type(e).__name__}: {e}", (f"{msg.name} v{version}",)) from e
    if r.remaining():
        raise MalformedFrame(f"{r.remaining()} bytes left after {msg.name} v{version}")
    return body


def reference_encode(msg: Any, obj: Any, version: int) -> bytes:
    """``msg.to_bytes(obj, version)`` through the reference codec (same error wrapping)."""
    c = reference_codec(msg, version, msg.is_flexible(version))
    w = Writer()
    try:
        c.encode(w, obj)
    except EncodeError as e:
        raise e.at(f"{msg.name} v{version}") from None
    return w.tobytes()
