"""The commands of the metadata state machine: what the payload bytes of a quorum log entry
mean to :class:`~broker_core.raft.metadata_tree.MetadataTree`.

Encoding (version 1): one UTF-8 JSON object per entry, compact separators, with

- ``"v"``: the encoding version, ``1``. A decoder refuses any other version
  (:class:`UnsupportedCommandVersion`) rather than guess: a replica that skipped an entry it did
  not understand would diverge from the others;
- ``"t"``: the proposer's wall clock in milliseconds (``ctime``/``mtime`` of what the command
  creates or changes: the tree never reads a clock, so every replica stores the same times);
- ``"c"``: the command name, and its fields (short keys, below).

======================  =====================================================================
``c``                   fields
======================  =====================================================================
``create``              ``p`` path, ``d`` value (base64), ``o`` owner session (0: persistent),
                        ``s`` sequence (bool)
``set``                 ``p``, ``d``, ``n`` expected version (-1: any)
``delete``              ``p``, ``n``, ``r`` recursive (bool: the subtree, atomically; absent
                        is not an error, as kazoo's recursive delete)
``check``               ``p``, ``n``
``multi``               ``ops``: a list of create/set/delete/check objects (without ``v``/``t``)
``open_session``        ``ms`` timeout in milliseconds
``close_session``       ``id`` session id
``expire_session``      ``id`` session id
======================  =====================================================================

JSON was kept over a binary layout because it is self-describing in a log dump and measured
fast enough: encoding and decoding a 100-byte ``set`` takes a few microseconds each
(``docs/raft.md`` has the figures), far below a quorum round trip.

Validation. :func:`decode` is also the validator: a payload decodes only if it holds a command this
version could have written, and every node runs it twice, before a command is proposed (the
leader refuses a MetadataWrite that does not decode, so nothing invalid is appended) and before
an entry is applied (an entry that does not decode is skipped alike by every replica, see
:mod:`broker_core.raft.metadata_tree`). It refuses, with :class:`MalformedCommand` naming the
reason:

- more than :data:`MAX_COMMAND_BYTES` bytes, or bytes that are not UTF-8;
- JSON nested deeper than :data:`MAX_NESTING` (a multi is three levels: the command, its list
  of operations, an operation), checked *before* parsing and without recursion, so a payload of
  ``[`` * 100,000 costs a scan, not the interpreter's stack;
- anything but a JSON object; a repeated key, a field the command does not have, a missing
  one, a value of the wrong type (``true`` is not an int; ``NaN`` and floats are not numbers
  here), an integer outside its range (64-bit ids and times, 32-bit versions and timeouts);
- an unknown command; a path that is not a valid node path (:func:`check_path`: ZooKeeper's
  rules, its forbidden characters included, at most :data:`MAX_PATH_CHARS`); a value that is
  not canonical base64 of at most :data:`MAX_VALUE_BYTES`; a multi of more than
  :data:`MAX_MULTI_OPS` operations or with a recursive delete;
- any encoding version but :data:`ENCODING_VERSION` (:class:`UnsupportedCommandVersion`).

Whatever the input, :func:`decode` returns an :class:`Envelope` or raises
:class:`MalformedCommand`; nothing else escapes it.

Versions. A node proposes only :data:`ENCODING_VERSION`. A later version must not be proposed
until every node of the cluster reads it (a feature level the whole cluster has agreed on, as
Kafka's ``metadata.version``); so an entry of another version in the log is damage or a
misbehaving writer, and every node that reads version 1 skips it the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

ENCODING_VERSION = 1

#: The most bytes one command may take: the metadata log keeps each entry in one record batch
#: of at most ``max.message.bytes`` (1,048,588 by default), header included.
MAX_COMMAND_BYTES = 1_000_000
#: The most bytes of one node's value (base64 makes it a third longer in the command).
MAX_VALUE_BYTES = 700_000
#: The longest node path, in characters.
MAX_PATH_CHARS = 4096
#: The most operations of one multi (ZooKeeper's store has the same cap, so callers batch the
#: same way on both stores).
MAX_MULTI_OPS = 1000
#: JSON nesting of the deepest command: a multi (object) holds its ``ops`` (list) of operations
#: (objects).
MAX_NESTING = 3

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)

#: Characters ZooKeeper refuses in a path (its PathUtils): NUL and the other control characters,
#: the surrogates and private-use block, and the specials at the end of the BMP.
_BAD_PATH_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


class MalformedCommand(ValueError):
    """Bytes that are not a command of a known encoding version; the message says why."""


class UnsupportedCommandVersion(MalformedCommand):
    """A command of another (newer, or unknown) encoding version."""


def check_path(path: str) -> str | None:
    """Why ``path`` is not a valid node path, or ``None`` if it is (ZooKeeper's rules:
    absolute, no empty, ``.`` or ``..`` component, no trailing slash but for the root, none of
    the characters ZooKeeper refuses; and at most :data:`MAX_PATH_CHARS` characters)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return f"path {path!r} must start with /"
    if len(path) > MAX_PATH_CHARS:
        return f"path of {len(path)} characters is longer than {MAX_PATH_CHARS}"
    if path == "/":
        return None
    if path.endswith("/"):
        return f"path {path!r} must not end with /"
    bad = _BAD_PATH_CHAR.search(path)
    if bad is not None:
        return f"path {path!r} has a forbidden character {bad.group()!r}"
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            return f"path {path!r} has an empty, '.' or '..' component"
    return None


@dataclass(frozen=True, slots=True)
class CreateNode:
    """Create ``path``; ``owner`` is the session that owns it if ephemeral (0: persistent);
    ``sequence`` appends the parent's child-change count as 10 digits."""

    path: str
    value: bytes = b""
    owner: int = 0
    sequence: bool = False


@dataclass(frozen=True, slots=True)
class SetNode:
    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteNode:
    path: str
    version: int = -1
    recursive: bool = False


@dataclass(frozen=True, slots=True)
class CheckNode:
    path: str
    version: int


NodeOp = CreateNode | SetNode | DeleteNode | CheckNode


@dataclass(frozen=True, slots=True)
class Multi:
    """All of ``ops`` or none of them (a recursive delete is not allowed inside)."""

    ops: tuple[NodeOp, ...]


@dataclass(frozen=True, slots=True)
class OpenSession:
    """A new session; its id is the offset of this entry."""

    timeout_ms: int


@dataclass(frozen=True, slots=True)
class CloseSession:
    session_id: int


@dataclass(frozen=True, slots=True)
class ExpireSession:
    """Proposed by the quorum leader when a session missed its heartbeats for its timeout."""

    session_id: int


Command = NodeOp | Multi | OpenSession | CloseSession | ExpireSession


@dataclass(frozen=True, slots=True)
class Envelope:
    """A command and the proposer's clock (milliseconds), as one log entry carries them."""

    command: Command
    time_ms: int = 0


# ---------------------------------------------------------------------------- encoding


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _op_dict(op: NodeOp) -> dict[str, Any]:
    if isinstance(op, CreateNode):
        return {"c": "create", "p": op.path, "d": _b64(op.value), "o": op.owner,
                "s": op.sequence}
    if isinstance(op, SetNode):
        return {"c": "set", "p": op.path, "d": _b64(op.value), "n": op.version}
    if isinstance(op, DeleteNode):
        return {"c": "delete", "p": op.path, "n": op.version, "r": op.recursive}
    if isinstance(op, CheckNode):
        return {"c": "check", "p": op.path, "n": op.version}
    raise TypeError(f"not a node operation: {op!r}")


def encode(command: Command, time_ms: int = 0) -> bytes:
    """The payload bytes of ``command`` proposed at ``time_ms``."""
    if isinstance(command, Multi):
        body: dict[str, Any] = {"c": "multi", "ops": [_op_dict(op) for op in command.ops]}
    elif isinstance(command, OpenSession):
        body = {"c": "open_session", "ms": command.timeout_ms}
    elif isinstance(command, CloseSession):
        body = {"c": "close_session", "id": command.session_id}
    elif isinstance(command, ExpireSession):
        body = {"c": "expire_session", "id": command.session_id}
    else:
        body = _op_dict(command)
    body["v"] = ENCODING_VERSION
    body["t"] = int(time_ms)
    return json.dumps(body, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------- decoding

#: A JSON string (escapes included); what lies between two matches is outside any string.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: An innermost pair of brackets, once strings and everything else are gone.
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")

#: The fields of each command besides ``c`` (and, at the top level, ``v`` and ``t``).
_FIELDS: dict[str, frozenset[str]] = {
    "create": frozenset("pdos"), "set": frozenset("pdn"), "delete": frozenset("pnr"),
    "check": frozenset("pn"), "multi": frozenset({"ops"}), "open_session": frozenset({"ms"}),
    "close_session": frozenset({"id"}), "expire_session": frozenset({"id"}),
}
_NODE_OPS = frozenset({"create", "set", "delete", "check"})


def _check_nesting(text: str) -> None:
    """Refuse ``text`` if its JSON nests deeper than :data:`MAX_NESTING` (or its brackets do
    not pair), before any parser sees it. Linear and without recursion: strings are cut out,
    then each round removes the innermost bracket pairs, so ``MAX_NESTING`` rounds empty any
    well-formed skeleton that is shallow enough."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return  # too few brackets to nest deeper (the common single-operation command)
    if "\\" in text:
        outside = _JSON_STRING.sub("", text)
    else:  # no escapes: every quote opens or closes a string (the common case, and faster)
        outside = "".join(text.split('"')[0::2])
    skeleton = _NOT_BRACKET.sub("", outside)
    for _ in range(MAX_NESTING):
        skeleton = _EMPTY_PAIR.sub("", skeleton)
        if not skeleton:
            return
    raise MalformedCommand(f"metadata command nests deeper than {MAX_NESTING} levels or its "
                           "brackets do not pair")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise MalformedCommand("metadata command repeats a key")
    return obj


def _no_constant(name: str) -> Any:
    raise MalformedCommand(f"metadata command holds {name}, which is not a number here")


def _field(obj: dict[str, Any], key: str, kind: type, what: str) -> Any:
    try:
        value = obj[key]
    except KeyError:
        raise MalformedCommand(f"{what}: missing field {key!r}") from None
    # bool is an int in Python; a version or an id must not be true/false.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedCommand(f"{what}: field {key!r} should be {kind.__name__}, got "
                               f"{type(value).__name__}")
    return value


def _int(obj: dict[str, Any], key: str, what: str, low: int, high: int) -> int:
    value = _field(obj, key, int, what)
    if not low <= value <= high:
        raise MalformedCommand(f"{what}: field {key!r} is {value}, outside [{low}, {high}]")
    return value


def _only(obj: dict[str, Any], allowed: frozenset[str], what: str) -> None:
    extra = obj.keys() - allowed
    if extra:
        raise MalformedCommand(f"{what}: unknown field(s) {sorted(extra)}")


def _path(obj: dict[str, Any], what: str, sequence: bool = False) -> str:
    path = _field(obj, "p", str, what)
    # A sequential create's path is checked with its suffix ("/q/" makes "/q/0000000000").
    problem = check_path(path + "0000000000" if sequence else path)
    if problem is not None:
        raise MalformedCommand(f"{what}: {problem}")
    return path


def _value(obj: dict[str, Any], what: str) -> bytes:
    text = _field(obj, "d", str, what)
    if len(text) > 4 * ((MAX_VALUE_BYTES + 2) // 3):
        raise MalformedCommand(f"{what}: value longer than {MAX_VALUE_BYTES} bytes")
    if not text.isascii():
        raise MalformedCommand(f"{what}: value is not base64 (a character outside ASCII)")
    try:
        value = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise MalformedCommand(f"{what}: value is not base64 ({e})") from None
    if len(value) > MAX_VALUE_BYTES:
        raise MalformedCommand(f"{what}: value of {len(value)} bytes is longer than "
                               f"{MAX_VALUE_BYTES}")
    if _b64(value) != text:  # unused bits set: another text for the same bytes
        raise MalformedCommand(f"{what}: value is not canonical base64")
    return value


def _decode_op(obj: Any, what: str) -> NodeOp:
    if not isinstance(obj, dict):
        raise MalformedCommand(f"{what}: not an object")
    name = _field(obj, "c", str, what)
    if name not in _NODE_OPS:
        raise MalformedCommand(f"{what}: unknown command {name[:40]!r}")
    what = f"{what} ({name})"
    _only(obj, _FIELDS[name] | {"c"}, what)
    return _decode_node_op(obj, name, what)


def _decode_node_op(obj: dict[str, Any], name: str, what: str) -> NodeOp:
    if name == "create":
        sequence = _field(obj, "s", bool, what)
        return CreateNode(_path(obj, what, sequence), _value(obj, what),
                          _int(obj, "o", what, 0, _INT64[1]), sequence)
    if name == "set":
        return SetNode(_path(obj, what), _value(obj, what), _int(obj, "n", what, -1, _INT32[1]))
    if name == "delete":
        return DeleteNode(_path(obj, what), _int(obj, "n", what, -1, _INT32[1]),
                          _field(obj, "r", bool, what))
    return CheckNode(_path(obj, what), _int(obj, "n", what, -1, _INT32[1]))


def _parse(payload: bytes) -> Any:
    """``payload`` as JSON, within the bounds above; :class:`MalformedCommand` otherwise."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise MalformedCommand(f"metadata command is {type(payload).__name__}, not bytes")
    if len(payload) > MAX_COMMAND_BYTES:
        raise MalformedCommand(f"metadata command of {len(payload)} bytes is longer than "
                               f"{MAX_COMMAND_BYTES}")
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedCommand(f"metadata command is not UTF-8: {e}") from None
    _check_nesting(text)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:  # RecursionError: cannot happen past the check
        if isinstance(e, MalformedCommand):
            raise
        raise MalformedCommand(f"metadata command is not JSON: {e}") from None


def decode(payload: bytes) -> Envelope:
    """The command in ``payload``; :class:`MalformedCommand` (or its
    :class:`UnsupportedCommandVersion`) when it is not a valid one. Nothing else is raised,
    whatever ``payload`` holds (see the module docstring for what is checked)."""
    obj = _parse(payload)
    if not isinstance(obj, dict):
        raise MalformedCommand("metadata command is not a JSON object")
    version = obj.get("v")
    if type(version) is not int or version != ENCODING_VERSION:
        raise UnsupportedCommandVersion(
            f"metadata command encoding version {repr(version)[:40]}; this node reads version "
            f"{ENCODING_VERSION} only")
    time_ms = _int(obj, "t", "metadata command", 0, _INT64[1])
    name = _field(obj, "c", str, "metadata command")
    if name not in _FIELDS:
        raise MalformedCommand(f"metadata command: unknown command {name[:40]!r}")
    what = f"metadata command ({name})"
    _only(obj, _FIELDS[name] | {"v", "t", "c"}, what)
    command: Command
    if name == "multi":
        ops = _field(obj, "ops", list, what)
        if len(ops) > MAX_MULTI_OPS:
            raise MalformedCommand(f"{what}: {len(ops)} operations, more than {MAX_MULTI_OPS}")
        command = Multi(tuple(_decode_op(op, f"{what} op {i}") for i, op in enumerate(ops)))
        if any(isinstance(op, DeleteNode) and op.recursive for op in command.ops):
            raise MalformedCommand(f"{what}: a recursive delete cannot be part of a multi")
    elif name == "open_session":
        command = OpenSession(_int(obj, "ms", what, 1, _INT32[1]))
    elif name == "close_session":
        command = CloseSession(_int(obj, "id", what, 1, _INT64[1]))
    elif name == "expire_session":
        command = ExpireSession(_int(obj, "id", what, 1, _INT64[1]))
    else:
        command = _decode_node_op(obj, name, what)
    return Envelope(command, time_ms)
