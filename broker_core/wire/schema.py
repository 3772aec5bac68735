"""A small declarative DSL for Kafka message schemas, compiled once per version.

A schema is a list of :class:`Field`; a field has a type (a primitive name such as ``"int32"``,
``"string"``, ``"records"``, an array ``"[]int32"``, or a nested list of fields for struct types),
the versions it exists in, the versions it may be null in, a default, and optionally a tag (a
tagged field of flexible versions). ``Message(fields, valid, flexible)`` compiles, per version, a
plan of (name, reader, writer) steps, so encoding and decoding a Produce or Fetch body walks a
precomputed list instead of re-checking version ranges per field.

Decoded values are :class:`Struct` objects that carry *every* field the message has in any
version (absent ones hold their default), so callers need not branch on versions. Encoding accepts
a ``Struct``, a ``dict`` or any object with the attributes; a missing value takes its default. A
field absent from the target version is skipped when it holds its default and raises
:class:`~broker_core.wire.errors.EncodeError` otherwise (Kafka's non-ignorable rule), unless the
field is marked ``ignorable``. Unknown tagged fields are skipped on decode.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Callable, Sequence
from typing import Any

from broker_core.wire.errors import EncodeError, MalformedFrame
from broker_core.wire.primitives import ZERO_UUID, Reader, Writer

_MISSING = object()


def parse_versions(spec: str | None) -> tuple[int, int]:
    """``"3+"`` → (3, 32767), ``"0-12"`` → (0, 12), ``"5"`` → (5, 5), None/``"none"`` → empty."""
    if spec is None or spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), 0x7FFF)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def _in(rng: tuple[int, int], v: int) -> bool:
    return rng[0] <= v <= rng[1]


class Struct:
    """A decoded message or sub-struct: attribute access, equality (useful in tests), repr."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Struct):
            return self.__dict__ == other.__dict__
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Struct({inner})"

    def get(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        def conv(v: Any) -> Any:
            if isinstance(v, Struct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        return {k: conv(v) for k, v in self.__dict__.items()}


class Field:
    """One field of a schema; see the module docstring."""

    def __init__(
        self,
        name: str,
        type_: str | Sequence[Field],
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
        tag: int | None = None,
        ignorable: bool = False,
    ) -> None:
        self.name = name
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.ignorable = ignorable or tag is not None
        self.is_array = False
        self.struct: list[Field] | None = None
        if isinstance(type_, str):
            if type_.startswith("[]"):
                self.is_array = True
                self.elem = type_[2:]
            else:
                self.elem = type_
        else:
            self.is_array = True
            self.elem = "struct"
            self.struct = list(type_)
        self._default = default

    def struct_field(self, single: bool) -> Field:
        """Mark a struct-typed field as a single struct instead of an array of them."""
        self.is_array = not single
        return self

    def default(self, version: int) -> Any:
        if self._default is not _MISSING:
            return self._default
        if _in(self.nullable, version) and self.elem != "struct" or (
                self.is_array and _in(self.nullable, version)):
            return None
        if self.is_array:
            return []
        if self.elem == "struct":
            return None
        return _PRIMITIVE_DEFAULTS[self.elem]

    def plain_default(self) -> Any:
        if self._default is not _MISSING:
            return self._default
        if self.is_array:
            return []
        if self.elem == "struct":
            return None
        return _PRIMITIVE_DEFAULTS[self.elem]


def single(name: str, fields: Sequence[Field], versions: str = "0+", *, tag: int | None = None,
           nullable: str | None = None) -> Field:
    """A field holding one nested struct (not an array)."""
    f = Field(name, fields, versions, tag=tag, nullable=nullable)
    f.is_array = False
    return f


_PRIMITIVE_DEFAULTS: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0, "bool": False,
    "string": "", "bytes": b"", "records": None, "uuid": ZERO_UUID,
}


def _prim_reader(elem: str, nullable: bool, compact: bool) -> Callable[[Reader], Any]:
    if elem == "int8":
        return Reader.int8
    if elem == "int16":
        return Reader.int16
    if elem == "int32":
        return Reader.int32
    if elem == "int64":
        return Reader.int64
    if elem == "uint16":
        return Reader.uint16
    if elem == "float64":
        return Reader.float64
    if elem == "bool":
        return Reader.bool
    if elem == "uuid":
        return Reader.uuid
    if elem == "string":
        return lambda r: r.string(nullable, compact)
    if elem in ("bytes", "records"):
        return lambda r: r.bytes_(nullable or elem == "records", compact)
    raise ValueError(f"unknown type {elem}")


def _prim_writer(elem: str, compact: bool) -> Callable[[Writer, Any], None]:
    if elem == "int8":
        return Writer.int8
    if elem == "int16":
        return Writer.int16
    if elem == "int32":
        return Writer.int32
    if elem == "int64":
        return Writer.int64
    if elem == "uint16":
        return Writer.uint16
    if elem == "float64":
        return Writer.float64
    if elem == "bool":
        return Writer.bool
    if elem == "uuid":
        return lambda w, v: w.uuid(_as_uuid(v))
    if elem == "string":
        return lambda w, v: w.string(v, compact)
    if elem in ("bytes", "records"):
        return lambda w, v: w.bytes_(v, compact)
    raise ValueError(f"unknown type {elem}")


def _as_uuid(v: Any) -> _uuid.UUID | None:
    if v is None or isinstance(v, _uuid.UUID):
        return v
    if isinstance(v, bytes | bytearray) and len(v) == 16:
        return _uuid.UUID(bytes=bytes(v))
    return _uuid.UUID(str(v))


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, _MISSING)
    return getattr(obj, name, _MISSING)


class _Plan:
    """The compiled steps of one struct at one version."""

    __slots__ = ("readers", "writers", "absent", "tagged_readers", "tagged_writers", "flexible",
                 "checks")

    def __init__(self) -> None:
        self.readers: list[tuple[str, Callable[[Reader], Any]]] = []
        self.writers: list[tuple[str, Callable[[Writer, Any], None], Any]] = []
        self.absent: list[tuple[str, Any]] = []
        self.checks: list[tuple[str, Any]] = []
        self.tagged_readers: dict[int, tuple[str, Callable[[Reader], Any]]] = {}
        self.tagged_writers: list[tuple[int, str, Callable[[Writer, Any], None], Any]] = []
        self.flexible = False


class StructSchema:
    """A list of fields compiled lazily per (version, flexible)."""

    def __init__(self, fields: Sequence[Field]) -> None:
        self.fields = list(fields)
        self._plans: dict[tuple[int, bool], _Plan] = {}

    def plan(self, version: int, flexible: bool) -> _Plan:
        key = (version, flexible)
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = self._compile(version, flexible)
        return p

    def _compile(self, version: int, flexible: bool) -> _Plan:
        plan = _Plan()
        plan.flexible = flexible
        for f in self.fields:
            present = _in(f.versions, version)
            if f.tag is not None and not flexible:
                present = False
            if not present:
                plan.absent.append((f.name, f.plain_default()))
                if not f.ignorable:
                    plan.checks.append((f.name, f.plain_default()))
                continue
            reader, writer = self._accessors(f, version, flexible)
            if f.tag is not None:
                plan.tagged_readers[f.tag] = (f.name, reader)
                plan.tagged_writers.append((f.tag, f.name, writer, f.default(version)))
            else:
                plan.readers.append((f.name, reader))
                plan.writers.append((f.name, writer, f.default(version)))
        plan.tagged_writers.sort(key=lambda t: t[0])
        return plan

    def _accessors(self, f: Field, version: int, flexible: bool
                   ) -> tuple[Callable[[Reader], Any], Callable[[Writer, Any], None]]:
        nullable = _in(f.nullable, version)
        if f.elem == "struct":
            sub = StructSchema(f.struct or [])

            def read_one(r: Reader) -> Any:
                return sub.decode(r, version, flexible)

            def write_one(w: Writer, v: Any) -> None:
                sub.encode(w, v, version, flexible)
        else:
            read_one = _prim_reader(f.elem, nullable, flexible)
            write_one = _prim_writer(f.elem, flexible)

        if not f.is_array:
            if f.elem == "struct":
                if nullable:
                    def read_opt(r: Reader) -> Any:
                        return None if r.int8() < 0 else read_one(r)

                    def write_opt(w: Writer, v: Any) -> None:
                        if v is None:
                            w.int8(-1)
                        else:
                            w.int8(1)
                            write_one(w, v)
                    return read_opt, write_opt
            return read_one, write_one

        def read_arr(r: Reader) -> Any:
            n = r.array_len(nullable, flexible)
            if n is None:
                return None
            return [read_one(r) for _ in range(n)]

        def write_arr(w: Writer, v: Any) -> None:
            if v is None:
                if not nullable:
                    raise EncodeError(f"field {f.name} is not nullable at v{version}")
                w.array_len(None, flexible)
                return
            w.array_len(len(v), flexible)
            for x in v:
                write_one(w, x)

        return read_arr, write_arr

    def decode(self, r: Reader, version: int, flexible: bool) -> Struct:
        plan = self.plan(version, flexible)
        s = Struct()
        d = s.__dict__
        for name, reader in plan.readers:
            d[name] = reader(r)
        for name, default in plan.absent:
            d[name] = default
        if flexible:
            tags = r.skip_tagged_fields()
            for tag, (name, _) in plan.tagged_readers.items():
                d.setdefault(name, None)
            for tag, raw in tags.items():
                entry = plan.tagged_readers.get(tag)
                if entry is not None:
                    sub = Reader(raw)
                    d[entry[0]] = entry[1](sub)
            for _tag, name, _w, default in plan.tagged_writers:
                if d.get(name) is None:
                    d[name] = default
        return s

    def encode(self, w: Writer, obj: Any, version: int, flexible: bool) -> None:
        plan = self.plan(version, flexible)
        for name, writer, default in plan.writers:
            v = _get(obj, name)
            if v is _MISSING:
                v = default
            try:
                writer(w, v)
            except EncodeError:
                raise
            except Exception as e:
                raise EncodeError(f"cannot encode field {name}={v!r} at v{version}: {e}") from e
        for name, default in plan.checks:
            v = _get(obj, name)
            if v is not _MISSING and v != default and v is not None:
                raise EncodeError(f"field {name} does not exist at v{version} but holds {v!r}")
        if flexible:
            present = []
            for tag, name, writer, default in plan.tagged_writers:
                v = _get(obj, name)
                if v is _MISSING or v is None or v == default:
                    continue
                sub = Writer()
                writer(sub, v)
                present.append((tag, b"".join(sub.getvalue())))
            w.uvarint(len(present))
            for tag, raw in present:
                w.uvarint(tag)
                w.uvarint(len(raw))
                w.raw(raw)


class Message:
    """A top-level request or response schema with its valid and flexible version ranges."""

    def __init__(self, name: str, fields: Sequence[Field], *, valid: str, flexible: str) -> None:
        self.name = name
        self.schema = StructSchema(fields)
        self.valid = parse_versions(valid)
        self.flexible = parse_versions(flexible)

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible, version)

    def decode(self, r: Reader, version: int) -> Struct:
        if not _in(self.valid, version):
            raise MalformedFrame(f"{self.name} has no version {version}")
        return self.schema.decode(r, version, self.is_flexible(version))

    def encode(self, obj: Any, version: int, w: Writer | None = None) -> Writer:
        if not _in(self.valid, version):
            raise EncodeError(f"{self.name} has no version {version}")
        w = w or Writer()
        self.schema.encode(w, obj, version, self.is_flexible(version))
        return w
