"""A small declarative DSL for Kafka message schemas, compiled per version.

A message is declared once, the way Kafka's JSON specs describe it::

    PRODUCE_REQUEST = Message("ProduceRequest", versions="3-9", flexible="9+", fields=[
        Field("transactional_id", STRING, "3+", nullable="3+"),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field("topic_data", Array(Schema("TopicProduceData", [
            Field("name", STRING),
            Field("partition_data", Array(Schema("PartitionProduceData", [
                Field("index", INT32),
                Field("records", RECORDS, nullable="0+"),
            ]))),
        ]))),
    ])

and then ``PRODUCE_REQUEST.decode(reader, version)`` / ``PRODUCE_REQUEST.encode(obj, version,
writer)``.

Rules the DSL keeps
-------------------
- **Names** are Kafka's field names in snake_case (``PartitionMaxBytes`` becomes
  ``partition_max_bytes``).
- **Versions** are ``"3+"``, ``"3-5"``, ``"3"``, ``"none"`` or a tuple ``(3, None)``.
- **Flexible versions** (per message) switch strings, bytes, records and arrays to their compact
  forms and add a tagged-field section to every struct. A field with ``tag=`` travels in that
  section in its ``tagged_versions`` (default: its ``versions``), and is written only when it
  differs from its default.
- **Defaults**: an explicit ``default=``; otherwise ``None`` for a field that is nullable in every
  version it exists in; otherwise the type's zero (0, False, "", b"", [], the zero UUID, a struct
  of defaults). A decoded struct holds *every* field of its schema: fields missing at the decoded
  version hold their default.
- **Encoding a field the version does not have**: skipped when it holds its default (``None`` and
  empty collections count as "nothing" there too). A non-default value raises
  :class:`~broker_core.wire.errors.EncodeError` naming the field, unless the field is
  ``ignorable=True`` (Kafka's flag), in which case it is silently dropped, as Kafka does. A key that
  is no field of the schema at all always raises (it is a typo, not a version difference).
- **Unknown tagged fields** met while decoding are kept as raw bytes in the struct's
  ``_unknown_tags`` attribute (``{tag: bytes}``, only present when there were some) and written back
  when the struct is encoded again in a flexible version; they do not take part in ``==``.

Speed
-----
Produce and Fetch go through here thousands of times a second, and a failover decodes and encodes
tens of thousands of partition structs, so each ``(schema, version)`` gets a decode and an encode
function generated as straight-line Python source (compiled once, when a message version is
first used): runs of fixed-width fields become one bounds check and one ``struct`` call, every
other field one call of its type's reader or writer, a decoded struct one dict display; arrays
of fixed-width numbers are packed/unpacked in one call, and ``records`` are zero-copy
``memoryview`` slices (see :mod:`broker_core.wire.primitives`). The shapes a small Produce or
Fetch is made of are read and written inline too: strings under 127 bytes, arrays of fewer
than 127 structs (the element's own codec called directly, no array closure) and record data
under 16 KiB; anything longer, null where it may not be, or malformed falls back to the type's
reader or writer, so the bytes and the errors are the same either way. A codec's functions
carry their source in ``__source__``. A value many messages repeat unchanged can be encoded once
(:meth:`Array.pre_encode`, :class:`Encoded`).
"""

from __future__ import annotations

import functools
import struct
import uuid as _uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from broker_core.wire.errors import EncodeError, MalformedFrame, ProtocolError
from broker_core.wire.primitives import ZERO_UUID, Reader, Writer

VersionSpec = str | int | tuple[int, int | None] | None
ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Marks "no explicit default" on a :class:`Field`."""


# -- version ranges ---------------------------------------------------------------------------


def parse_versions(spec: VersionSpec) -> tuple[int, int | None] | None:
    """``"3+"`` -> (3, None); ``"3-5"`` -> (3, 5); ``"3"``/3 -> (3, 3); ``"none"``/None -> None."""
    if spec is None:
        return None
    if isinstance(spec, tuple):
        lo, hi = spec
        if lo < 0 or (hi is not None and hi < lo):
            raise ValueError(f"bad version range {spec!r}")
        return (lo, hi)
    if isinstance(spec, int):
        return (spec, spec)
    s = spec.strip()
    if s == "none":
        return None
    if s.endswith("+"):
        return parse_versions((int(s[:-1]), None))
    if "-" in s:
        lo, hi = s.split("-", 1)
        return parse_versions((int(lo), int(hi)))
    return parse_versions((int(s), int(s)))


def _contains(rng: tuple[int, int | None] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version and (rng[1] is None or version <= rng[1])


def _covers(outer: tuple[int, int | None] | None, inner: tuple[int, int | None] | None) -> bool:
    if inner is None:
        return True
    if outer is None:
        return False
    if outer[0] > inner[0]:
        return False
    return outer[1] is None or (inner[1] is not None and inner[1] <= outer[1])


# -- values -----------------------------------------------------------------------------------


class Struct:
    """A decoded (or hand-built) message or nested struct.

    Invariant: an instance holds exactly the fields of its schema (``_fields``) as attributes,
    each either set by the caller or at its default. Build one with keyword arguments
    (``ProduceRequest.cls(acks=1, ...)`` or ``message.make(acks=1)``); nested dicts and lists of
    dicts are turned into structs. Instances compare equal when their classes and field values
    are equal, which is what tests want.
    """

    _schema: ClassVar[Schema]
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        schema = self._schema
        d = schema._fresh_defaults()
        fields = schema.field_map
        for k, v in kwargs.items():
            f = fields.get(k)
            if f is None:
                raise TypeError(f"{schema.name} has no field {k!r}")
            d[k] = f.type.coerce(v)
        self.__dict__.update(d)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        a, b = self.__dict__, other.__dict__
        return all(a[n] == b[n] for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        d = self.__dict__
        inner = ", ".join(f"{n}={_short_repr(d[n])}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def _asdict(self) -> dict[str, Any]:
        """The fields as a plain (deep) dict; byte slices become ``bytes``."""
        return {n: _plain(self.__dict__[n]) for n in self._fields}


def _short_repr(v: Any) -> str:
    if isinstance(v, memoryview):
        return f"<{len(v)} bytes>"
    if isinstance(v, bytes | bytearray) and len(v) > 32:
        return f"<{len(v)} bytes>"
    return repr(v)


def _plain(v: Any) -> Any:
    if isinstance(v, Struct):
        return v._asdict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


# -- types ------------------------------------------------------------------------------------


class Type:
    """A field type. ``reader``/``writer`` return the function for one (version, flexible,
    nullable) combination; compiled schemas call those functions directly."""

    name = "?"
    fixed: str | None = None  # struct format character for fixed-width types

    def zero(self) -> Any:
        raise NotImplementedError

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        raise NotImplementedError

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        raise NotImplementedError

    def min_size(self, version: int, flexible: bool) -> int:
        raise NotImplementedError

    def coerce(self, v: Any) -> Any:
        """Turn a value given by a caller into the value a decoded struct would hold."""
        return v

    def same(self, a: Any, b: Any) -> bool:
        return a == b

    def __repr__(self) -> str:
        return self.name


class _Fixed(Type):
    def __init__(self, name: str, fmt: str, zero: Any) -> None:
        self.name = name
        self.fixed = fmt
        self._zero = zero
        self._st = struct.Struct(">" + fmt)

    def zero(self) -> Any:
        return self._zero

    def min_size(self, version: int, flexible: bool) -> int:
        return self._st.size

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        st = self._st
        return lambda r: r.fixed(st)[0]

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        st = self._st
        return lambda w, v: w.fixed(st, (v,))


class _Variable(Type):
    """A type read and written by one of four primitive methods (classic/compact x nullable)."""

    def __init__(self, name: str, zero: Any, readers: dict[tuple[bool, bool], ReadFn],
                 writers: dict[tuple[bool, bool], WriteFn], min_classic: int) -> None:
        self.name = name
        self._zero = zero
        self._readers = readers
        self._writers = writers
        self._min_classic = min_classic

    def zero(self) -> Any:
        return self._zero

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else self._min_classic

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        return self._readers[(flexible, nullable)]

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        return self._writers[(flexible, nullable)]


class _Records(Type):
    """Opaque record data: decoded as a zero-copy ``memoryview``; encoded from bytes-like
    objects or a list of them (written back to back, never joined)."""

    name = "records"

    def zero(self) -> Any:
        return b""

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 4

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        read = Reader.compact_records if flexible else Reader.records
        if nullable:
            return read

        def read_non_null(r: Reader) -> memoryview:
            v = read(r)
            if v is None:
                raise MalformedFrame("non-nullable records field is null")
            return v

        return read_non_null

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        def write(w: Writer, v: Any) -> None:
            if v is None and not nullable:
                raise EncodeError("records field is not nullable in this version")
            w.records(v, flexible)

        return write


class _Uuid(Type):
    name = "uuid"

    def zero(self) -> Any:
        return ZERO_UUID

    def min_size(self, version: int, flexible: bool) -> int:
        return 16

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        return Reader.uuid

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        return Writer.uuid

    def coerce(self, v: Any) -> Any:
        if v is None:
            return ZERO_UUID
        if isinstance(v, bytes | bytearray) and len(v) == 16:
            return _uuid.UUID(bytes=bytes(v))
        if isinstance(v, str):
            return _uuid.UUID(v)
        return v


INT8 = _Fixed("int8", "b", 0)
INT16 = _Fixed("int16", "h", 0)
INT32 = _Fixed("int32", "i", 0)
INT64 = _Fixed("int64", "q", 0)
UINT16 = _Fixed("uint16", "H", 0)
UINT32 = _Fixed("uint32", "I", 0)
FLOAT64 = _Fixed("float64", "d", 0.0)
BOOL = _Fixed("bool", "?", False)
STRING = _Variable(
    "string", "",
    {(False, False): Reader.string, (False, True): Reader.nullable_string,
     (True, False): Reader.compact_string, (True, True): Reader.compact_nullable_string},
    {(False, False): Writer.string, (False, True): Writer.nullable_string,
     (True, False): Writer.compact_string, (True, True): Writer.compact_nullable_string},
    2)
BYTES = _Variable(
    "bytes", b"",
    {(False, False): Reader.bytes_, (False, True): Reader.nullable_bytes,
     (True, False): Reader.compact_bytes, (True, True): Reader.compact_nullable_bytes},
    {(False, False): Writer.bytes_, (False, True): Writer.nullable_bytes,
     (True, False): Writer.compact_bytes, (True, True): Writer.compact_nullable_bytes},
    4)
RECORDS = _Records()
UUID = _Uuid()


class Encoded:
    """An array value encoded ahead of time (:meth:`Array.pre_encode`), for a value that many
    messages repeat unchanged (Metadata's partitions of a topic, between two changes).

    Invariant: ``data`` is exactly what ``array_type``'s writer writes for the value at
    ``version`` (and ``flexible``). A writer of that array at that version writes ``data`` as it
    is; any other writer refuses it with :class:`~broker_core.wire.errors.EncodeError`.
    """

    __slots__ = ("array_type", "version", "flexible", "data")

    def __init__(self, array_type: Array, version: int, flexible: bool, data: bytes) -> None:
        self.array_type = array_type
        self.version = version
        self.flexible = flexible
        self.data = data

    def __repr__(self) -> str:
        return f"Encoded({self.array_type.name} v{self.version}, {len(self.data)} bytes)"


def _write_encoded(w: Writer, v: Encoded, array_type: Array, version: int,
                   flexible: bool) -> None:
    if v.array_type is not array_type or v.version != version or v.flexible != flexible:
        raise EncodeError(f"{v!r} cannot be written as {array_type.name} at version {version}")
    w.raw(v.data)


class Array(Type):
    """An array of a primitive type or of a :class:`Schema` (Kafka's ``[]Type``)."""

    def __init__(self, element: Type) -> None:
        if not isinstance(element, Type):
            raise TypeError(f"array element must be a type or a Schema, not {element!r}")
        self.element = element
        self.name = f"[]{element.name}"

    def zero(self) -> Any:
        return []

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 4

    def coerce(self, v: Any) -> Any:
        if v is None or type(v) is Encoded:
            return v
        el = self.element
        return [el.coerce(x) for x in v]

    def pre_encode(self, value: Any, version: int, flexible: bool) -> Encoded:
        """``value`` encoded once, to be written as it is by every later message at
        ``version`` (see :class:`Encoded`)."""
        w = Writer()
        self.writer(version, flexible, False)(w, value)
        return Encoded(self, version, flexible, w.tobytes())

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        el = self.element
        # Every element takes at least this many bytes, which bounds a believable count.
        min_el = max(1, el.min_size(version, flexible))
        length = Reader.compact_array_length if flexible else Reader.array_length

        def count(r: Reader) -> int | None:
            n = length(r, min_el)
            if n is None and not nullable:
                raise MalformedFrame(f"non-nullable array {self.name} is null")
            return n

        if el.fixed is not None:
            fmt = el.fixed
            size = struct.calcsize(">" + fmt)

            def read_fixed(r: Reader) -> list | None:
                n = count(r)
                if n is None:
                    return None
                pos = r.pos
                r.pos = pos + n * size  # count() checked that these bytes exist
                return list(struct.unpack_from(f">{n}{fmt}", r.buf, pos))

            return read_fixed

        read_el = el.reader(version, flexible, False)

        def read_array(r: Reader) -> list | None:
            n = count(r)
            if n is None:
                return None
            return [read_el(r) for _ in range(n)]

        return read_array

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        el = self.element
        length = Writer.compact_array_length if flexible else Writer.array_length

        def write_null(w: Writer) -> None:
            if not nullable:
                raise EncodeError(f"array {self.name} is not nullable in this version")
            length(w, None)

        if el.fixed is not None:
            fmt = el.fixed

            def write_fixed(w: Writer, v: Any) -> None:
                if v is None:
                    write_null(w)
                    return
                if type(v) is Encoded:
                    _write_encoded(w, v, self, version, flexible)
                    return
                n = len(v)
                length(w, n)
                w.pack(f">{n}{fmt}", v)

            return write_fixed

        write_el = el.writer(version, flexible, False)

        def write_array(w: Writer, v: Any) -> None:
            if type(v) is Encoded:
                _write_encoded(w, v, self, version, flexible)
                return
            if v is None:
                write_null(w)
                return
            length(w, len(v))
            for i, item in enumerate(v):
                try:
                    write_el(w, item)
                except EncodeError as e:
                    raise e.at(f"[{i}]") from None

        return write_array


class Field:
    """One field of a schema: name, type and the versions it exists in (see module docstring)."""

    def __init__(self, name: str, type: Type, versions: VersionSpec = "0+", *,
                 nullable: VersionSpec = None, default: Any = MISSING, ignorable: bool = False,
                 tag: int | None = None, tagged_versions: VersionSpec = MISSING) -> None:
        if not isinstance(type, Type):
            raise TypeError(f"field {name}: type must be a Type, not {type!r}")
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.ignorable = ignorable
        self.tag = tag
        if tag is None:
            self.tagged_versions = None
        else:
            self.tagged_versions = parse_versions(
                versions if tagged_versions is MISSING else tagged_versions)
        if self.nullable is not None and type.fixed is not None:
            raise ValueError(f"field {name}: fixed-width {type.name} cannot be nullable")
        if default is MISSING:
            default = None if (self.nullable is not None
                               and _covers(self.nullable, self.versions)) else type.zero()
        else:
            default = type.coerce(default)
        self.default = default
        # Encoding never mutates a missing value, so an immutable stand-in serves for a list
        # default, and an empty dict (= "all defaults") for a struct default.
        if isinstance(default, list):
            self._enc_default: Any = tuple(default)
        elif isinstance(default, Struct):
            self._enc_default = default.__dict__
        else:
            self._enc_default = default

    def exists(self, version: int) -> bool:
        return _contains(self.versions, version)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and _contains(self.tagged_versions, version)

    def nullable_in(self, version: int) -> bool:
        return _contains(self.nullable, version)

    def fresh_default(self) -> Any:
        d = self.default
        if isinstance(d, list):
            return list(d)
        if isinstance(d, Struct):
            return d._schema.build(d._asdict())
        return d

    def holds_default(self, v: Any) -> bool:
        """True when ``v`` says nothing beyond the default; ``None`` and empty values are the same
        "nothing" here (used for fields the target version does not have)."""
        if _is_empty(v) and _is_empty(self.default):
            return True
        if v is None:  # e.g. a UUID field: None means the zero UUID
            return self.type.coerce(None) == self.default
        return self.type.same(self.type.coerce(v), self.default)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {self.versions})"


def _is_empty(v: Any) -> bool:
    return v is None or (isinstance(v, str | bytes | bytearray | memoryview | list | tuple)
                         and len(v) == 0)


# -- schemas ----------------------------------------------------------------------------------


class _Codec:
    """The compiled form of one schema at one (version, flexible) pair."""

    __slots__ = ("decode", "encode", "min_size")

    def __init__(self, decode: Callable[[Reader], Struct], encode: WriteFn, min_size: int) -> None:
        self.decode = decode
        self.encode = encode
        self.min_size = min_size


class Schema(Type):
    """A struct type: an ordered list of fields (Kafka's nested ``fields`` / common structs).

    Invariant: ``cls`` is the :class:`Struct` subclass whose instances this schema decodes to,
    and a compiled codec exists for every (version, flexible) pair it has been used at.
    """

    def __init__(self, name: str, fields: Sequence[Field]) -> None:
        self.name = name
        self.fields = list(fields)
        self.field_map = {f.name: f for f in self.fields}
        if len(self.field_map) != len(self.fields):
            raise ValueError(f"{name}: duplicate field names")
        tags = [f.tag for f in self.fields if f.tag is not None]
        if len(set(tags)) != len(tags):
            raise ValueError(f"{name}: duplicate tags")
        self.cls: type[Struct] = type(name, (Struct,), {
            "_schema": self, "_fields": tuple(self.field_map), "__module__": __name__})
        self._codecs: dict[tuple[int, bool], _Codec] = {}

    # -- values ---------------------------------------------------------------------------------

    def _fresh_defaults(self) -> dict[str, Any]:
        return {f.name: f.fresh_default() for f in self.fields}

    def make(self, **kwargs: Any) -> Struct:
        """A struct of this schema; missing fields take their defaults."""
        return self.cls(**kwargs)

    def build(self, obj: Any) -> Struct:
        """A struct from a dict (nested dicts included) or a struct of this schema."""
        return self.coerce(obj)

    def zero(self) -> Any:
        return self.make()

    def coerce(self, v: Any) -> Any:
        if isinstance(v, Struct) or v is None:
            return v
        if isinstance(v, dict):
            return self.cls(**v)
        raise EncodeError(f"{self.name}: expected a dict or {self.name}, got {type(v).__name__}")

    # -- compiled codecs --------------------------------------------------------------------------

    def codec(self, version: int, flexible: bool) -> _Codec:
        c = self._codecs.get((version, flexible))
        if c is None:
            c = self._codecs[(version, flexible)] = self._compile(version, flexible)
        return c

    def min_size(self, version: int, flexible: bool) -> int:
        return self.codec(version, flexible).min_size

    def reader(self, version: int, flexible: bool, nullable: bool) -> ReadFn:
        return self.codec(version, flexible).decode

    def writer(self, version: int, flexible: bool, nullable: bool) -> WriteFn:
        return self.codec(version, flexible).encode

    def _compile(self, version: int, flexible: bool) -> _Codec:
        return _generate(self, version, flexible)


# -- generated codecs -----------------------------------------------------------------------------
#
# Each (schema, version, flexible) gets one decode and one encode function, written out as Python
# source and compiled once: runs of fixed-width fields are one bounds check and one
# ``unpack_from``/``pack``, every other field one call of its type's reader or writer, and a
# decoded struct is one dict display. Walking a list of steps per value (what Sluice did before,
# kept in ``tests/support/wire_reference.py``) cost a loop, a tuple unpack and a closure call per
# field; a failover decodes and encodes tens of thousands of partition structs per second.
# Whatever the generated code does, the reference did too: same bytes, same structs, same errors
# at the same field paths (``tests/unit/test_wire_generated.py`` checks every message version).


def _fresh_copy(v: Any) -> Any:
    """A copy of a default value that shares nothing mutable with it (structs and lists are
    copied all the way down)."""
    if isinstance(v, Struct):
        obj = object.__new__(type(v))
        obj.__dict__ = {k: _fresh_copy(x) for k, x in v.__dict__.items()}
        return obj
    if isinstance(v, list):
        return [_fresh_copy(x) for x in v]
    return v


class _Source:
    """Python source being generated, with the objects it refers to as named constants."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}

    def const(self, value: Any, hint: str = "c") -> str:
        name = f"_{hint}{len(self.names)}"
        self.names[name] = value
        return name

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _default_expr(src: _Source, f: Field, indent: int) -> str:
    """An expression giving ``f``'s default: the value itself when immutable, else a fresh copy
    each time (a decoded struct never shares a mutable default with another). A struct of
    immutable values is copied by statements added to ``src`` here (no call per copy: the
    tagged structs of a Fetch partition are three copies per partition)."""
    d = f.default
    if isinstance(d, list):
        return "[]" if not d else f"{src.const(_fresh_copy, 'copy')}({src.const(d, 'dflt')})"
    if isinstance(d, Struct):
        if any(isinstance(v, Struct | list) for v in d.__dict__.values()):
            return f"{src.const(_fresh_copy, 'copy')}({src.const(d, 'dflt')})"
        local = f"c{len(src.names)}"
        src.add(indent, f"{local} = _new({src.const(type(d), 'cls')})")
        src.add(indent, f"{local}.__dict__ = {src.const(dict(d.__dict__), 'tmpl')}.copy()")
        return local
    if d is None or isinstance(d, bool | int | str | bytes):
        return repr(d)
    return src.const(d, "dflt")


def _generate_decode(schema: Schema, version: int, flexible: bool, present: list[Field],
                     tagged: list[Field], absent: list[Field], namespace: dict[str, Any]) -> Any:
    """The source of ``decode(r)`` for one version of ``schema``, compiled: the fields in
    wire order (runs of fixed-width ones unpacked by one struct call), then the tagged
    section; a MalformedFrame names the field being read."""
    name = schema.name
    src = _Source()
    src.add(0, "def decode(r):")
    src.add(1, f"step = {name!r}")
    src.add(1, "try:")
    values: dict[str, str] = {}  # field name -> expression of its decoded value
    for run in _runs(present):
        if run[0].type.fixed is not None:
            st = struct.Struct(">" + "".join(f.type.fixed for f in run))  # type: ignore[misc]
            locals_ = [f"v{len(values) + i}" for i in range(len(run))]
            src.add(2, f"step = {','.join(f.name for f in run)!r}")
            src.add(2, "pos = r.pos")
            src.add(2, f"if {st.size} > r.end - pos:")
            src.add(3, f"raise MalformedFrame('fixed-width fields needs {st.size} bytes, only ' "
                       "f'{r.end - pos} left')")
            src.add(2, f"r.pos = pos + {st.size}")
            unpack = f"{src.const(st, 'st')}.unpack_from(r.buf, pos)"
            if len(run) == 1:
                src.add(2, f"{locals_[0]} = {unpack}[0]")
            else:
                src.add(2, f"{', '.join(locals_)} = {unpack}")
            for f, local in zip(run, locals_, strict=True):
                values[f.name] = local
        else:
            f = run[0]
            local = f"v{len(values)}"
            read = src.const(f.type.reader(version, flexible, f.nullable_in(version)), "read")
            src.add(2, f"step = {f.name!r}")
            nullable = f.nullable_in(version)
            if isinstance(f.type, Array) and f.type.element.fixed is not None:
                _decode_small_fixed_array(src, f.type.element, flexible, local, read)
            elif isinstance(f.type, Array) and isinstance(f.type.element, Schema):
                _decode_struct_array(src, f.type.element, version, flexible, nullable, local,
                                     read)
            elif f.type is STRING:
                _decode_short_string(src, flexible, nullable, local, read)
            elif f.type is RECORDS:
                _decode_records(src, flexible, local, read)
            else:
                src.add(2, f"{local} = {read}(r)")
            values[f.name] = local
    for f in tagged:
        values[f.name] = _default_expr(src, f, 2)
    for f in absent:
        values[f.name] = _default_expr(src, f, 2)
    display = ", ".join(f"{f.name!r}: {values[f.name]}" for f in schema.fields)
    src.add(2, f"d = {{{display}}}")
    if flexible:
        tag_fields = {f.tag: (f.name, f.type.reader(version, True, f.nullable_in(version)))
                      for f in tagged}
        src.add(2, "step = '<tagged fields>'")
        # The usual case: an empty tagged-field section, one zero byte.
        src.add(2, "pos = r.pos")
        src.add(2, "if pos < r.end and r.buf[pos] == 0:")
        src.add(3, "r.pos = pos + 1")
        src.add(2, "else:")
        src.add(3, f"unknown = {src.const(_read_tagged, 'tags')}(r, "
                   f"{src.const(tag_fields, 'tagf')}, d)")
        src.add(3, "if unknown:")
        src.add(4, "d['_unknown_tags'] = unknown")
    src.add(1, "except MalformedFrame as e:")
    src.add(2, "raise e.at(step) from None")
    src.add(1, f"obj = _new({src.const(schema.cls, 'cls')})")
    src.add(1, "obj.__dict__ = d")
    src.add(1, "return obj")
    return _exec(src, namespace, "decode", f"{name} v{version} decode")


def _absent_field_checks(schema: Schema, version: int, present_names: frozenset[str]
                         ) -> tuple[Callable[[Field, Any], None], Callable[[dict], None]]:
    """The encoder's checks of what ``version`` cannot carry: ``check_absent(field, value)``
    refuses a value for a field this version lacks unless Kafka marks it ignorable or it holds
    the default; ``check_dict_keys(d)`` refuses unknown keys and applies ``check_absent``."""
    name = schema.name
    field_map = schema.field_map

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

    return check_absent, check_dict_keys


def _generate_encode(schema: Schema, version: int, flexible: bool, present: list[Field],
                     tagged: list[Field], absent: list[Field], namespace: dict[str, Any]) -> Any:
    """The source of ``encode(w, obj)`` for one version of ``schema``, compiled: a dict or
    Struct is checked for fields this version cannot carry, then written in wire order; an
    EncodeError names the field being written."""
    name = schema.name
    src = _Source()
    present_names = frozenset(f.name for f in present) | {f.name for f in tagged}
    check_absent, check_dict_keys = _absent_field_checks(schema, version, present_names)
    src.add(0, "def encode(w, obj):")
    src.add(1, "if type(obj) is dict:")
    src.add(2, "d = obj")
    src.add(2, f"if not {src.const(present_names, 'names')}.issuperset(d):")
    src.add(3, f"{src.const(check_dict_keys, 'keys')}(d)")
    src.add(1, "elif isinstance(obj, Struct):")
    src.add(2, f"if obj._schema is not {src.const(schema, 'schema')}:")
    src.add(3, f"raise EncodeError(f'expected {name}, got {{type(obj).__name__}}')")
    src.add(2, "d = obj.__dict__")
    if absent:
        check = src.const(check_absent, "absent")
        for f in absent:
            src.add(2, f"{check}({src.const(f, 'f')}, d[{f.name!r}])")
    src.add(1, "else:")
    src.add(2, f"raise EncodeError(f'expected a dict or {name}, got {{type(obj).__name__}}')")
    src.add(1, f"step = {name!r}")
    src.add(1, "try:")
    src.add(2, "get = d.get")
    if not present and not flexible:
        src.add(2, "pass")
    for run in _runs(present):
        if run[0].type.fixed is not None:
            st = struct.Struct(">" + "".join(f.type.fixed for f in run))  # type: ignore[misc]
            args = ", ".join(f"get({f.name!r}, {_enc_default_expr(src, f)})" for f in run)
            # A run has no single name: on a bad value the run's blame function names the field.
            src.add(2, "step = ''")
            src.add(2, "try:")
            src.add(3, f"w.fixed({src.const(st, 'st')}, ({args},))")
            src.add(2, "except struct_error:")
            src.add(3, f"{src.const(_fixed_blame(run), 'blame')}(d)")
            src.add(3, "raise")
        else:
            f = run[0]
            write = src.const(f.type.writer(version, flexible, f.nullable_in(version)), "write")
            src.add(2, f"step = {f.name!r}")
            if isinstance(f.type, Array) and f.type.element.fixed is not None:
                _encode_small_fixed_array(src, f, flexible, write)
            elif isinstance(f.type, Array) and isinstance(f.type.element, Schema):
                _encode_struct_array(src, f, version, flexible, write)
            elif f.type is STRING:
                _encode_short_string(src, f, flexible, f.nullable_in(version), write)
            else:
                src.add(2, f"{write}(w, get({f.name!r}, {_enc_default_expr(src, f)}))")
    if flexible:
        tag_writers = [(f, f.type.writer(version, True, f.nullable_in(version))) for f in tagged]
        src.add(2, "step = '<tagged fields>'")
        # Nothing tagged to send (the usual case) is one zero byte; anything else goes through
        # the general writer, which drops values equal to their defaults.
        cond = ["'_unknown_tags' in d"]
        for f in tagged:
            td = src.const(functools.partial(_tag_default, f), "tagdflt")
            cond.append(f"((t := get({f.name!r}, _MISSING)) is not _MISSING and not {td}(t))")
        src.add(2, f"if {' or '.join(cond)}:")
        src.add(3, f"{src.const(_write_tagged, 'wtags')}(w, {src.const(tag_writers, 'tagw')}, d)")
        src.add(2, "else:")
        src.add(3, "w.uvarint(0)")
    src.add(1, "except EncodeError as e:")
    src.add(2, "raise (e.at(step) if step else e) from None")
    src.add(1, "except (struct_error, TypeError, ValueError, OverflowError, AttributeError) as e:")
    src.add(2, "raise EncodeError(f'bad value: {e}', (step,) if step else ()) from None")
    return _exec(src, namespace, "encode", f"{name} v{version} encode")


def _generate(schema: Schema, version: int, flexible: bool) -> _Codec:
    present = [f for f in schema.fields if f.exists(version) and not f.is_tagged(version)]
    tagged = sorted((f for f in schema.fields if flexible and f.exists(version)
                     and f.is_tagged(version)), key=lambda f: f.tag)
    absent = [f for f in schema.fields if f not in present and f not in tagged]
    min_size = sum(f.type.min_size(version, flexible) for f in present) + (1 if flexible else 0)
    namespace = {
        "MalformedFrame": MalformedFrame, "EncodeError": EncodeError, "Struct": Struct,
        "struct_error": struct.error, "_new": object.__new__, "_MISSING": MISSING,
    }
    decode = _generate_decode(schema, version, flexible, present, tagged, absent, namespace)
    encode = _generate_encode(schema, version, flexible, present, tagged, absent, namespace)
    return _Codec(decode, encode, min_size)


#: Arrays of fixed-width numbers shorter than this (replica lists, ISRs: a few broker ids) are
#: read and written inline with a prebuilt ``struct.Struct`` per length; longer or unusual ones
#: (null, a multi-byte length, too few bytes left) go through the type's reader or writer,
#: which also raises the errors. Same bytes and errors either way, without the length-read call
#: chain and a format string per array: a failover's LeaderAndIsr and UpdateMetadata carry
#: three or four such arrays per partition.
SMALL_ARRAY = 32


def _small_array_structs(fmt: str) -> tuple[struct.Struct, ...]:
    return tuple(struct.Struct(f">{n}{fmt}") for n in range(SMALL_ARRAY))


def _decode_small_fixed_array(src: _Source, element: Type, flexible: bool, local: str,
                              read: str) -> None:
    sts = src.const(_small_array_structs(element.fixed), "sts")  # type: ignore[arg-type]
    size = struct.calcsize(">" + element.fixed)  # type: ignore[operator]
    src.add(2, "pos = r.pos")
    src.add(2, "buf = r.buf")
    if flexible:  # a one-byte uvarint length n + 1
        src.add(2, f"n = buf[pos] - 1 if pos < r.end else {SMALL_ARRAY}")
        src.add(2, "start = pos + 1")
    else:  # an int32 length
        src.add(2, f"n = {src.const(_I32_ST, 'i32')}.unpack_from(buf, pos)[0] "
                   f"if pos + 4 <= r.end else {SMALL_ARRAY}")
        src.add(2, "start = pos + 4")
    src.add(2, f"if 0 <= n < {SMALL_ARRAY} and start + n * {size} <= r.end:")
    src.add(3, f"{local} = list({sts}[n].unpack_from(buf, start))")
    src.add(3, f"r.pos = start + n * {size}")
    src.add(2, "else:")
    src.add(3, f"{local} = {read}(r)")


def _decode_struct_array(src: _Source, element: Schema, version: int, flexible: bool,
                         nullable: bool, local: str, read: str) -> None:
    # The count read inline when it is one byte (compact) or a non-negative int32 (classic)
    # that the bytes left can hold; the elements by the element's own decode, no array closure.
    # A null, multi-byte or lying count goes through the type's reader, which raises the errors.
    read_el = src.const(element.codec(version, flexible).decode, "readel")
    min_el = max(1, element.min_size(version, flexible))
    src.add(2, "pos = r.pos")
    if flexible:
        src.add(2, "n = r.buf[pos] - 1 if pos < r.end else -1")
        src.add(2, "start = pos + 1")
    else:
        src.add(2, f"n = {src.const(_I32_ST, 'i32')}.unpack_from(r.buf, pos)[0] "
                   "if pos + 4 <= r.end else -1")
        src.add(2, "start = pos + 4")
    src.add(2, f"if 0 <= n < 127 and n * {min_el} <= r.end - start:")
    src.add(3, "r.pos = start")
    src.add(3, f"{local} = [{read_el}(r)] if n == 1 else [{read_el}(r) for _ in range(n)]")
    if nullable:  # a null array: a classic int32 -1 or a compact 0 (Fetch's aborted txns)
        src.add(2, "elif n == -1 and start <= r.end:")
        src.add(3, f"{local} = None")
        src.add(3, "r.pos = start")
    src.add(2, "else:")
    src.add(3, f"{local} = {read}(r)")


def _decode_short_string(src: _Source, flexible: bool, nullable: bool, local: str,
                         read: str) -> None:
    # A string under 127 bytes whose length (one compact byte or a classic int16) fits in
    # what is left is read inline, and a null one (where it may be null) is None inline.
    # Anything else (longer, a lying length, bad UTF-8, a null where none may be) goes through
    # the type's reader, which raises the errors.
    src.add(2, "pos = r.pos")
    src.add(2, "buf = r.buf")
    if flexible:
        src.add(2, "n = buf[pos] - 1 if pos < r.end else 127")
        src.add(2, "start = pos + 1")
    else:
        src.add(2, f"n = {src.const(_I16_ST, 'i16')}.unpack_from(buf, pos)[0] "
                   "if pos + 2 <= r.end else 127")
        src.add(2, "start = pos + 2")
    src.add(2, "if 0 <= n < 127 and start + n <= r.end:")
    src.add(3, "try:")
    src.add(4, f"{local} = str(buf[start:start + n], 'utf-8')")
    src.add(4, "r.pos = start + n")
    src.add(3, "except UnicodeDecodeError:")
    src.add(4, f"{local} = {read}(r)")
    if nullable:
        src.add(2, "elif n == -1:")
        src.add(3, f"{local} = None")
        src.add(3, "r.pos = start")
    src.add(2, "else:")
    src.add(3, f"{local} = {read}(r)")


def _decode_records(src: _Source, flexible: bool, local: str, read: str) -> None:
    # Record data of a non-null length that fits (compact: a one- or two-byte uvarint, under
    # 16 KiB), sliced inline; a null, longer or lying length goes through the type's reader.
    src.add(2, "pos = r.pos")
    src.add(2, "buf = r.buf")
    src.add(2, "end = r.end")
    if flexible:
        src.add(2, "n = -1")
        src.add(2, "if pos + 1 < end:")
        src.add(3, "b = buf[pos]")
        src.add(3, "if b < 0x80:")
        src.add(4, "n = b - 1")
        src.add(4, "start = pos + 1")
        src.add(3, "elif buf[pos + 1] < 0x80:")
        src.add(4, "n = (b & 0x7F | buf[pos + 1] << 7) - 1")
        src.add(4, "start = pos + 2")
    else:
        src.add(2, f"n = {src.const(_I32_ST, 'i32')}.unpack_from(buf, pos)[0] "
                   "if pos + 4 <= end else -1")
        src.add(2, "start = pos + 4")
    src.add(2, "if 0 <= n and start + n <= end:")
    src.add(3, f"{local} = buf[start:start + n]")
    src.add(3, "r.pos = start + n")
    src.add(2, "else:")
    src.add(3, f"{local} = {read}(r)")


def _encode_small_fixed_array(src: _Source, f: Field, flexible: bool, write: str) -> None:
    sts = src.const(_small_array_structs(f.type.element.fixed), "sts")  # type: ignore[attr-defined]
    if flexible:
        prefixes = tuple(bytes([n + 1]) for n in range(SMALL_ARRAY))
    else:
        prefixes = tuple(_I32_ST.pack(n) for n in range(SMALL_ARRAY))
    src.add(2, f"v = get({f.name!r}, {_enc_default_expr(src, f)})")
    src.add(2, f"if (type(v) is list or type(v) is tuple) and len(v) < {SMALL_ARRAY}:")
    src.add(3, f"w.prefixed({src.const(prefixes, 'pre')}[len(v)], {sts}[len(v)], v)")
    src.add(2, "else:")
    src.add(3, f"{write}(w, v)")


#: A one-byte compact length (n + 1) for every length the short paths write inline.
_COMPACT_PREFIXES = tuple(bytes([n + 1]) for n in range(127))


def _encode_struct_array(src: _Source, f: Field, version: int, flexible: bool,
                         write: str) -> None:
    # A list of fewer than 127 structs: its length written from a table and each element by
    # the element's own encode, no array closure; an element's error is named by its index,
    # as the type's writer names it. Anything else (None, Encoded, longer) goes to that writer.
    element: Schema = f.type.element  # type: ignore[attr-defined]
    write_el = src.const(element.codec(version, flexible).encode, "writeel")
    prefixes = _COMPACT_PREFIXES if flexible else tuple(_I32_ST.pack(n) for n in range(127))
    src.add(2, f"v = get({f.name!r}, {_enc_default_expr(src, f)})")
    src.add(2, "if (type(v) is list or type(v) is tuple) and len(v) < 127:")
    src.add(3, f"w.raw({src.const(prefixes, 'pre')}[len(v)])")
    src.add(3, "i = 0")
    src.add(3, "try:")
    src.add(4, "for item in v:")
    src.add(5, f"{write_el}(w, item)")
    src.add(5, "i += 1")
    src.add(3, "except EncodeError as e:")
    src.add(4, "raise e.at(f'[{i}]') from None")
    if f.nullable_in(version):
        src.add(2, "elif v is None:")
        null = b"\x00" if flexible else b"\xff\xff\xff\xff"
        src.add(3, f"w.raw({null!r})")
    src.add(2, "else:")
    src.add(3, f"{write}(w, v)")


def _encode_short_string(src: _Source, f: Field, flexible: bool, nullable: bool,
                         write: str) -> None:
    # A str of fewer than 127 UTF-8 bytes written as one length-prefixed piece, a null one
    # as its one marker; anything else (long, not a str, null where it may not be) goes to the
    # type's writer, which raises the errors.
    if flexible:
        prefixes = _COMPACT_PREFIXES
        null = b"\x00"
    else:
        prefixes = tuple(_I16_ST.pack(n) for n in range(127))
        null = b"\xff\xff"
    src.add(2, f"v = get({f.name!r}, {_enc_default_expr(src, f)})")
    src.add(2, "if type(v) is str and len(data := v.encode('utf-8')) < 127:")
    src.add(3, f"w.raw({src.const(prefixes, 'pre')}[len(data)] + data)")
    if nullable:
        src.add(2, "elif v is None:")
        src.add(3, f"w.raw({null!r})")
    src.add(2, "else:")
    src.add(3, f"{write}(w, v)")


_I32_ST = struct.Struct(">i")
_I16_ST = struct.Struct(">h")


def _enc_default_expr(src: _Source, f: Field) -> str:
    d = f._enc_default  # immutable stand-ins: encoding never mutates a missing value
    if d is None or isinstance(d, bool | int | str | bytes):
        return repr(d)
    return src.const(d, "edflt")


def _exec(src: _Source, namespace: dict[str, Any], fn: str, label: str) -> Callable:
    code = "\n".join(src.lines) + "\n"
    scope = {**namespace, **src.names}
    exec(compile(code, f"<sluice wire: {label}>", "exec"), scope)  # noqa: S102 (our own source)
    f = scope[fn]
    f.__source__ = code  # for debugging: print(codec.decode.__source__)
    return f


def _fixed_blame(run: list[Field]) -> Callable[[dict], None]:
    """For a run of fixed-width fields whose pack failed: raise an EncodeError naming the
    first field whose value does not fit, or return (the caller re-raises the pack error)."""

    def blame(d: dict) -> None:
        for f in run:
            v = d.get(f.name, f.default)
            try:
                struct.pack(">" + f.type.fixed, v)  # type: ignore[operator]
            except struct.error as e:
                raise EncodeError(f"{_short_repr(v)} is not a valid {f.type.name} ({e})",
                                  (f.name,)) from None

    return blame


def _runs(fields: list[Field]) -> Iterable[list[Field]]:
    """Consecutive fixed-width fields grouped together; every other field alone."""
    run: list[Field] = []
    for f in fields:
        if f.type.fixed is not None:
            run.append(f)
            continue
        if run:
            yield run
            run = []
        yield [f]
    if run:
        yield run


def _read_tagged(r: Reader, tag_fields: dict[int, tuple[str, ReadFn]],
                 d: dict[str, Any]) -> dict[int, bytes] | None:
    unknown: dict[int, bytes] | None = None
    for _ in range(r.uvarint()):
        tag, size = r.tagged_field_header()
        start = r.pos
        entry = tag_fields.get(tag)
        if entry is None:
            if unknown is None:
                unknown = {}
            unknown[tag] = bytes(r.buf[start:start + size])
            r.pos = start + size
            continue
        fname, read = entry
        sub = Reader(r.buf, start, start + size)
        try:
            d[fname] = read(sub)
        except MalformedFrame as e:
            raise e.at(fname) from None
        if sub.pos != sub.end:
            raise MalformedFrame(f"tagged field {fname} has {sub.end - sub.pos} extra bytes")
        r.pos = start + size
    return unknown


def _write_tagged(w: Writer, tag_writers: list[tuple[Field, WriteFn]], d: dict) -> None:
    unknown = d.get("_unknown_tags")
    if unknown is None:
        present = [(f, d[f.name]) for f, _ in tag_writers
                   if f.name in d and not _tag_default(f, d[f.name])]
        if not present:
            w.uvarint(0)  # the usual case: nothing tagged to send
            return
    values: dict[int, bytes] = dict(unknown or {})
    for f, write in tag_writers:
        v = d.get(f.name, MISSING)
        if v is MISSING or _tag_default(f, v):
            continue
        sub = Writer()
        try:
            write(sub, v)
        except EncodeError as e:
            raise e.at(f.name) from None
        values[f.tag] = sub.tobytes()  # type: ignore[index]
    w.tagged_fields(values)


def _tag_default(f: Field, v: Any) -> bool:
    # A tagged field is sent only when it says something: exactly its default stays home.
    if v is None or f.default is None:
        return v is f.default
    return f.type.same(f.type.coerce(v), f.default)


class Message(Schema):
    """A top-level request or response body, valid at ``versions`` and flexible at
    ``flexible``. ``encode``/``decode`` are the hot-path entry points."""

    def __init__(self, name: str, fields: Sequence[Field], *, versions: VersionSpec,
                 flexible: VersionSpec = "none") -> None:
        super().__init__(name, fields)
        rng = parse_versions(versions)
        if rng is None or rng[1] is None:
            raise ValueError(f"{name}: a message needs a closed version range")
        self.min_version, self.max_version = rng
        self.flexible_versions = parse_versions(flexible)
        self.flexible_min_version = (None if self.flexible_versions is None
                                     else self.flexible_versions[0])
        for f in self.fields:
            _check_tags(name, f, self.flexible_versions)
        # Compiled on first use: generating every version of every message at import would
        # cost a client that speaks a few versions a fifth of a second of start-up.
        self._by_version = _VersionCodecs(self)

    def versions(self) -> range:
        return range(self.min_version, self.max_version + 1)

    def is_flexible(self, version: int) -> bool:
        return _contains(self.flexible_versions, version)

    def decode(self, reader: Reader, version: int) -> Struct:
        """Decode one body at ``version`` from ``reader`` (which is left after the body)."""
        try:
            c = self._by_version[version]
        except KeyError:
            raise ProtocolError(f"{self.name} has no version {version}") from None
        try:
            return c.decode(reader)
        except MalformedFrame as e:
            raise e.at(f"{self.name} v{version}") from None
        except (struct.error, ValueError, OverflowError, IndexError) as e:
            # A safety net: the readers check bounds themselves, so this means a bug, but a peer
            # must still only ever see a MalformedFrame.
            raise MalformedFrame(f"{type(e).__name__}: {e}", (f"{self.name} v{version}",)) from e

    def encode(self, obj: Any, version: int, writer: Writer) -> None:
        """Append ``obj`` (a dict or a struct of this message) encoded at ``version``."""
        try:
            c = self._by_version[version]
        except KeyError:
            raise EncodeError(f"{self.name} has no version {version} "
                              f"(v{self.min_version}-v{self.max_version})") from None
        try:
            c.encode(writer, obj)
        except EncodeError as e:
            raise e.at(f"{self.name} v{version}") from None

    def to_bytes(self, obj: Any, version: int) -> bytes:
        """Convenience for tests and tools: the body alone as one ``bytes``."""
        w = Writer()
        self.encode(obj, version, w)
        return w.tobytes()

    def from_bytes(self, data: bytes | memoryview, version: int) -> Struct:
        """Convenience for tests and tools: decode a whole buffer, refusing trailing bytes."""
        r = Reader(data)
        body = self.decode(r, version)
        if r.remaining():
            raise MalformedFrame(f"{r.remaining()} bytes left after {self.name} v{version}")
        return body


class _VersionCodecs(dict):
    """A message's codec per version, compiled when a version is first used; a version outside
    the message's range is a ``KeyError``."""

    def __init__(self, message: Message) -> None:
        super().__init__()
        self.message = message

    def __missing__(self, version: int) -> _Codec:
        m = self.message
        if not isinstance(version, int) or not m.min_version <= version <= m.max_version:
            raise KeyError(version)
        c = self[version] = m.codec(version, m.is_flexible(version))
        return c


def _check_tags(where: str, f: Field, flexible: tuple[int, int | None] | None) -> None:
    if f.tag is not None and not _covers(flexible, f.tagged_versions):
        raise ValueError(f"{where}.{f.name}: tagged versions {f.tagged_versions} are not all "
                         f"flexible ({flexible})")
    t = f.type
    if isinstance(t, Array):
        t = t.element
    if isinstance(t, Schema):
        for sub in t.fields:
            _check_tags(f"{where}.{f.name}", sub, flexible)
