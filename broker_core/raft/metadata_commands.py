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

Decoding anything else (not JSON, missing or mistyped fields, an unknown command) raises
:class:`MalformedCommand`, which names what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

ENCODING_VERSION = 1


class MalformedCommand(ValueError):
    """Bytes that are not a command of a known encoding version; the message says why."""


class UnsupportedCommandVersion(MalformedCommand):
    """A command written by a newer (or unknown) encoding; refused, never skipped."""


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


def _path(obj: dict[str, Any], what: str) -> str:
    path = _field(obj, "p", str, what)
    if not path.startswith("/"):
        raise MalformedCommand(f"{what}: path {path!r} is not absolute")
    return path


def _value(obj: dict[str, Any], what: str) -> bytes:
    try:
        return base64.b64decode(_field(obj, "d", str, what), validate=True)
    except binascii.Error as e:
        raise MalformedCommand(f"{what}: value is not base64 ({e})") from None


def _decode_op(obj: Any, what: str) -> NodeOp:
    if not isinstance(obj, dict):
        raise MalformedCommand(f"{what}: not an object")
    name = _field(obj, "c", str, what)
    what = f"{what} ({name})"
    if name == "create":
        return CreateNode(_path(obj, what), _value(obj, what), _field(obj, "o", int, what),
                          _field(obj, "s", bool, what))
    if name == "set":
        return SetNode(_path(obj, what), _value(obj, what), _field(obj, "n", int, what))
    if name == "delete":
        return DeleteNode(_path(obj, what), _field(obj, "n", int, what),
                          _field(obj, "r", bool, what))
    if name == "check":
        return CheckNode(_path(obj, what), _field(obj, "n", int, what))
    raise MalformedCommand(f"{what}: unknown command")


def decode(payload: bytes) -> Envelope:
    """The command in ``payload``; :class:`MalformedCommand` (or its
    :class:`UnsupportedCommandVersion`) when it is not one."""
    try:
        obj = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as e:
        raise MalformedCommand(f"metadata command is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise MalformedCommand("metadata command is not a JSON object")
    version = obj.get("v")
    if version != ENCODING_VERSION:
        raise UnsupportedCommandVersion(
            f"metadata command encoding version {version!r}; this node reads version "
            f"{ENCODING_VERSION} only")
    time_ms = _field(obj, "t", int, "metadata command")
    name = _field(obj, "c", str, "metadata command")
    what = f"metadata command ({name})"
    command: Command
    if name == "multi":
        ops = _field(obj, "ops", list, what)
        command = Multi(tuple(_decode_op(op, f"{what} op {i}") for i, op in enumerate(ops)))
        if any(isinstance(op, DeleteNode) and op.recursive for op in command.ops):
            raise MalformedCommand(f"{what}: a recursive delete cannot be part of a multi")
    elif name == "open_session":
        timeout = _field(obj, "ms", int, what)
        if timeout <= 0:
            raise MalformedCommand(f"{what}: timeout must be positive, got {timeout}")
        command = OpenSession(timeout)
    elif name == "close_session":
        command = CloseSession(_field(obj, "id", int, what))
    elif name == "expire_session":
        command = ExpireSession(_field(obj, "id", int, what))
    else:
        command = _decode_op(obj, "metadata command")
    return Envelope(command, time_ms)
