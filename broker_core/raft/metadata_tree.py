"""The metadata state machine of the quorum: a ZooKeeper-like tree of versioned nodes, built
by applying committed log entries in order.

Theory of operation
-------------------
Every replica feeds :meth:`MetadataTree.apply` the committed entries of the quorum's log, in
offset order, each payload a command of :mod:`broker_core.raft.metadata_commands`. The tree
never reads a clock or a random source: the proposer's time travels in the command, and the
entry's offset stands in for ZooKeeper's zxid. So **the same log gives the same tree on every
replica**, and what a stat says (``czxid``, ``mzxid``, a sequence suffix) is comparable across
replicas.

Semantics follow ZooKeeper, as :mod:`broker_core.zk.store` reports them:

- ``version`` starts at 0 and counts sets; ``cversion`` counts child creations and deletions;
  ``czxid`` is the offset of the entry that created the node, ``mzxid`` of the one that last
  set it (a multi is one entry, so all its changes share one offset). A broker that
  re-registers gets a new ``czxid``: the controller's broker epoch keeps working;
- a sequential create appends, as 10 digits, the number of children ever created under the
  parent: what a ZooKeeper 3.x server does (its deletes count in ``cversion`` but do not move
  the next sequence number; checked against a real server: create, create, delete, then a
  sequential create gets suffix 2 while ``cversion`` is 3);
- a parent must exist (:class:`NoNode`); creating parents is the client's job (``makepath``);
- ephemeral nodes belong to a session whose id is the offset of its ``open_session`` entry
  (always > 0: the quorum's first entry is a control record); they go when the session is
  closed or expired, and cannot have children (:class:`NoChildrenForEphemerals`);
- a multi applies all its operations or none; when one fails the result is
  :class:`TransactionFailed` whose ``results`` hold the error at the failing index and
  :class:`RolledBack` everywhere else, exactly as the ZooKeeper store translates kazoo's.

``apply`` returns an :class:`ApplyResult`: the operation's result (a value, or the typed error
of :mod:`broker_core.metadata` *as a value*: a failed command is a deterministic outcome of the
log, not an exception of the replica) and the watch events it caused.

Entries a node cannot apply. A committed entry whose payload does not decode
(:func:`~broker_core.raft.metadata_commands.decode` is the validator: another encoding version,
damaged bytes, a command no version-1 proposer writes) is **skipped**: the applied offset moves
past it, nothing else changes, and its result is the
:class:`~broker_core.raft.metadata_commands.MalformedCommand` (or
:class:`~broker_core.raft.metadata_commands.UnsupportedCommandVersion`) naming why, with
:attr:`ApplyResult.skipped` set to the reason (:data:`SKIP_MALFORMED`,
:data:`SKIP_UNSUPPORTED_VERSION`). A command that decodes but whose application raises an
unexpected exception (a bug) is rolled back and skipped the same way (:data:`SKIP_APPLY_ERROR`,
result :class:`ApplyFailed`). Validation depends on the payload only and the tree on the log
only, so every replica skips exactly the same entries and the trees stay equal; an entry that
cannot be applied is never a reason for a replica to stop applying or to fail to start. The
owner of the tree counts and logs what was skipped (``NetworkQuorumClient``). No version-1 node
proposes anything but version 1 (see :mod:`broker_core.raft.metadata_commands`), so skipping an
entry of another version cannot make a replica diverge from newer ones.

Invariants: the root ``/`` always exists; every node but the root has its parent in the tree
and is among the parent's children; an ephemeral node's owner is an open session and it has
no children; ``applied_offset`` only increases.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from broker_core.metadata import (
    BadVersion,
    MetadataStoreError,
    NodeExists,
    NoNode,
    NotEmpty,
    RolledBack,
    SessionExpired,
    Stat,
    TransactionFailed,
)
from broker_core.raft.metadata_commands import (
    CheckNode,
    CloseSession,
    Command,
    CreateNode,
    DeleteNode,
    ExpireSession,
    MalformedCommand,
    Multi,
    NodeOp,
    OpenSession,
    SetNode,
    UnsupportedCommandVersion,
    check_path,
    decode,
)

SNAPSHOT_VERSION = 1


class NoChildrenForEphemerals(MetadataStoreError):
    """A create under an ephemeral node (ZooKeeper's NoChildrenForEphemerals)."""


class BadArguments(MetadataStoreError):
    """An invalid path (ZooKeeper's BadArguments), e.g. deleting the root."""


class ApplyFailed(MetadataStoreError):
    """A command that decoded but could not be applied (an unexpected error of this code); it
    was rolled back and skipped."""


class SnapshotError(ValueError):
    """Snapshot bytes that cannot be read; the message says why."""


#: Why an entry was skipped (:attr:`ApplyResult.skipped`; the label of the skipped-entries
#: metric).
SKIP_MALFORMED = "malformed"
SKIP_UNSUPPORTED_VERSION = "unsupported_version"
SKIP_APPLY_ERROR = "apply_error"
SKIP_REASONS = (SKIP_MALFORMED, SKIP_UNSUPPORTED_VERSION, SKIP_APPLY_ERROR)


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _join(parent: str, name: str) -> str:
    return "/" + name if parent == "/" else f"{parent}/{name}"


class EventKind(Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILDREN = "children"  # the child list of ``path`` changed


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    path: str


@dataclass(slots=True)
class ApplyResult:
    """What one entry did: ``result`` (value or typed error), the watch ``events`` in the order
    they happened, and the session it opened or ended, if any. ``skipped`` is set (to a
    ``SKIP_*`` reason) when the entry could not be applied at all; ``result`` then says why."""

    result: Any
    events: list[WatchEvent] = field(default_factory=list)
    opened_session: int | None = None
    ended_session: int | None = None
    skipped: str | None = None

    @property
    def failed(self) -> bool:
        return isinstance(self.result, Exception)


@dataclass(slots=True)
class _Node:
    value: bytes
    version: int
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    owner: int
    cversion: int
    pzxid: int
    created_children: int = 0  # the next sequence suffix
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        return Stat(version=self.version, czxid=self.czxid, mzxid=self.mzxid,
                    ctime=self.ctime, mtime=self.mtime, ephemeral_owner=self.owner,
                    num_children=len(self.children), cversion=self.cversion)


def _root() -> _Node:
    return _Node(b"", 0, 0, 0, 0, 0, 0, 0, 0)


class _Failed(Exception):
    """Internal: carries the typed error of a failed operation out of the op methods."""

    def __init__(self, error: MetadataStoreError) -> None:
        self.error = error


class MetadataTree:
    """See the module docstring."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _root()}
        self._sessions: dict[int, int] = {}  # session id -> timeout (ms)
        self._ephemerals: dict[int, set[str]] = {}  # session id -> its ephemeral paths
        self.applied_offset = -1
        # While a command runs: the inverse of every change so far (a failed multi undoes
        # them in reverse) and the events it caused.
        self._undo: list[Callable[[], None]] = []
        self._events: list[WatchEvent] = []

    # ------------------------------------------------------------------ reads

    def get(self, path: str) -> tuple[bytes, Stat] | None:
        node = self._nodes.get(path)
        return None if node is None else (node.value, node.stat())

    def exists(self, path: str) -> Stat | None:
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def children(self, path: str) -> list[str] | None:
        node = self._nodes.get(path)
        return None if node is None else sorted(node.children)

    @property
    def sessions(self) -> dict[int, int]:
        """Open sessions: id -> timeout in milliseconds (a copy)."""
        return dict(self._sessions)

    def ephemerals(self, session_id: int) -> list[str]:
        return sorted(self._ephemerals.get(session_id, ()))

    def __len__(self) -> int:
        return len(self._nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataTree):
            return NotImplemented
        return self.to_snapshot() == other.to_snapshot()

    __hash__ = None  # type: ignore[assignment]  # mutable

    # ------------------------------------------------------------------ apply

    def apply(self, offset: int, payload: bytes) -> ApplyResult:
        """Apply the committed entry at ``offset`` whose payload is a metadata command; one
        that does not decode is skipped (see the module docstring)."""
        try:
            envelope = decode(payload)
        except MalformedCommand as e:
            self._advance(offset)
            reason = (SKIP_UNSUPPORTED_VERSION if isinstance(e, UnsupportedCommandVersion)
                      else SKIP_MALFORMED)
            return ApplyResult(e, skipped=reason)
        return self.apply_command(offset, envelope.command, envelope.time_ms)

    def skip(self, offset: int) -> None:
        """An entry that is not a metadata command (a Raft control record) passed ``offset``."""
        self._advance(offset)

    def _advance(self, offset: int) -> None:
        if offset <= self.applied_offset:
            raise ValueError(f"entry {offset} applied after entry {self.applied_offset}: "
                             "entries must be applied once each, in order")
        self.applied_offset = offset

    def apply_command(self, offset: int, command: Command, time_ms: int = 0) -> ApplyResult:
        """:meth:`apply` for a decoded command."""
        self._advance(offset)
        self._undo, self._events = [], []
        out = ApplyResult(None)
        try:
            if isinstance(command, Multi):
                out.result = self._multi(command.ops, offset, time_ms)
            elif isinstance(command, OpenSession):
                out.result = self._open_session(offset, command.timeout_ms)
                out.opened_session = offset
            elif isinstance(command, CloseSession | ExpireSession):
                out.result = self._end_session(command.session_id, offset)
                out.ended_session = command.session_id
            else:
                out.result = self._op(command, offset, time_ms)
        except _Failed as f:
            self._rollback()
            out.result = f.error
            out.opened_session = out.ended_session = None
        except Exception as e:  # a bug, not the log's fault: undo, skip, keep applying
            self._rollback()
            out = ApplyResult(ApplyFailed(f"applying {type(command).__name__} failed: {e!r}"),
                              skipped=SKIP_APPLY_ERROR)
        out.events = self._events if not out.failed else []
        self._undo, self._events = [], []
        return out

    def _rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._events = []

    def _multi(self, ops: tuple[NodeOp, ...], offset: int, time_ms: int) -> Any:
        results: list[Any] = []
        for i, op in enumerate(ops):
            if isinstance(op, DeleteNode) and op.recursive:
                error: MetadataStoreError = BadArguments("recursive delete inside a multi")
            else:
                try:
                    result = self._op(op, offset, time_ms)
                    # kazoo's transaction results: a delete gives True, as a check does.
                    results.append(True if result is None else result)
                    continue
                except _Failed as f:
                    error = f.error
            rolled = [RolledBack("rolled back") for _ in ops]
            rolled[i] = error
            raise _Failed(TransactionFailed(rolled))
        return results

    def _op(self, op: NodeOp, offset: int, time_ms: int) -> Any:
        # A sequential create's path is checked with its suffix ("/q/" makes "/q/0000000000").
        sequence = isinstance(op, CreateNode) and op.sequence
        problem = check_path(op.path + "0000000000" if sequence else op.path)
        if problem is not None:
            raise _Failed(BadArguments(problem))
        if isinstance(op, CreateNode):
            return self._create(op, offset, time_ms)
        if isinstance(op, SetNode):
            return self._set(op, offset, time_ms)
        if isinstance(op, DeleteNode):
            if op.recursive:
                return self._delete_recursive(op.path, offset)
            return self._delete(op, offset)
        if isinstance(op, CheckNode):
            self._existing(op.path, op.version)
            return True
        raise TypeError(f"not a node operation: {op!r}")

    def _existing(self, path: str, version: int) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise _Failed(NoNode(path))
        if version != -1 and version != node.version:
            raise _Failed(BadVersion(f"{path}: version {node.version}, expected {version}"))
        return node

    def _create(self, op: CreateNode, offset: int, time_ms: int) -> str:
        if op.path == "/":
            raise _Failed(NodeExists("/"))
        parent_path = parent_of(op.path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise _Failed(NoNode(parent_path))
        if parent.owner:
            raise _Failed(NoChildrenForEphemerals(
                f"{parent_path} is ephemeral and cannot have children"))
        path = f"{op.path}{parent.created_children:010d}" if op.sequence else op.path
        if path in self._nodes:
            raise _Failed(NodeExists(path))
        if op.owner and op.owner not in self._sessions:
            raise _Failed(SessionExpired(f"session {op.owner} is not open"))
        self._nodes[path] = _Node(op.value, 0, offset, offset, time_ms, time_ms, op.owner, 0,
                                  offset)
        self._undo.append(lambda: self._nodes.pop(path))
        if op.owner:
            owned = self._ephemerals[op.owner]
            owned.add(path)
            self._undo.append(lambda: owned.discard(path))
        self._child_changed(parent, path.rsplit("/", 1)[1], offset, added=True)
        self._events.append(WatchEvent(EventKind.CREATED, path))
        self._events.append(WatchEvent(EventKind.CHILDREN, parent_path))
        return path

    def _child_changed(self, parent: _Node, name: str, offset: int, added: bool) -> None:
        saved = (parent.cversion, parent.pzxid, parent.created_children)
        parent.cversion += 1
        parent.pzxid = offset
        if added:
            parent.created_children += 1
            parent.children.add(name)
        else:
            parent.children.discard(name)

        def undo() -> None:
            parent.cversion, parent.pzxid, parent.created_children = saved
            if added:
                parent.children.discard(name)
            else:
                parent.children.add(name)

        self._undo.append(undo)

    def _set(self, op: SetNode, offset: int, time_ms: int) -> Stat:
        node = self._existing(op.path, op.version)
        saved = (node.value, node.version, node.mzxid, node.mtime)
        node.value, node.version, node.mzxid, node.mtime = (op.value, node.version + 1, offset,
                                                            time_ms)

        def undo() -> None:
            node.value, node.version, node.mzxid, node.mtime = saved

        self._undo.append(undo)
        self._events.append(WatchEvent(EventKind.CHANGED, op.path))
        return node.stat()

    def _delete(self, op: DeleteNode, offset: int) -> None:
        if op.path == "/":
            raise _Failed(BadArguments("the root cannot be deleted"))
        node = self._existing(op.path, op.version)
        if node.children:
            raise _Failed(NotEmpty(op.path))
        self._remove(op.path, node, offset)

    def _remove(self, path: str, node: _Node, offset: int) -> None:
        del self._nodes[path]
        self._undo.append(lambda: self._nodes.__setitem__(path, node))
        if node.owner:
            owned = self._ephemerals[node.owner]
            owned.discard(path)
            self._undo.append(lambda: owned.add(path))
        parent_path = parent_of(path)
        self._child_changed(self._nodes[parent_path], path.rsplit("/", 1)[1], offset,
                            added=False)
        self._events.append(WatchEvent(EventKind.DELETED, path))
        self._events.append(WatchEvent(EventKind.CHILDREN, parent_path))

    def _delete_recursive(self, path: str, offset: int) -> None:
        if path == "/":
            raise _Failed(BadArguments("the root cannot be deleted"))
        node = self._nodes.get(path)
        if node is None:
            return None  # as kazoo's recursive delete: nothing to do is not an error
        for name in sorted(node.children):
            self._delete_recursive(_join(path, name), offset)
        self._remove(path, node, offset)
        return None

    # ------------------------------------------------------------------ sessions

    def _open_session(self, offset: int, timeout_ms: int) -> int:
        if offset <= 0:
            raise _Failed(BadArguments("a session id must be positive (offset 0 opened one)"))
        self._sessions[offset] = timeout_ms
        self._ephemerals[offset] = set()
        return offset

    def _end_session(self, session_id: int, offset: int) -> list[str]:
        """Close or expire ``session_id``; the result is its deleted ephemerals."""
        if session_id not in self._sessions:
            raise _Failed(SessionExpired(f"session {session_id} is not open"))
        gone = sorted(self._ephemerals[session_id])
        for path in gone:
            self._remove(path, self._nodes[path], offset)
        del self._sessions[session_id]
        del self._ephemerals[session_id]
        return gone

    # ------------------------------------------------------------------ snapshots

    def changes_to(self, other: MetadataTree) -> list[WatchEvent]:
        """The watch events that turn this tree into ``other`` (a snapshot that replaces it):
        a node only in ``other`` is CREATED, one only here DELETED, one in both whose data or
        identity (version, creation, last change) differs CHANGED, and one whose child list or
        child version differs has a CHILDREN event. Paths in sorted order, so parents come
        before their children. Nodes that are the same in both give no event."""
        events = []
        mine, theirs = self._nodes, other._nodes
        for path in sorted(mine.keys() | theirs.keys()):
            a, b = mine.get(path), theirs.get(path)
            if a is None:
                events.append(WatchEvent(EventKind.CREATED, path))
            elif b is None:
                events.append(WatchEvent(EventKind.DELETED, path))
            else:
                if (a.value, a.version, a.czxid, a.mzxid) != (b.value, b.version, b.czxid,
                                                              b.mzxid):
                    events.append(WatchEvent(EventKind.CHANGED, path))
                if a.children != b.children or a.cversion != b.cversion:
                    events.append(WatchEvent(EventKind.CHILDREN, path))
        return events

    def to_snapshot(self) -> bytes:
        """The whole tree as bytes (JSON, sorted: equal trees give equal bytes)."""
        nodes = [[path, base64.b64encode(n.value).decode("ascii"), n.version, n.czxid,
                  n.mzxid, n.ctime, n.mtime, n.owner, n.cversion, n.pzxid, n.created_children]
                 for path, n in sorted(self._nodes.items())]
        doc = {"v": SNAPSHOT_VERSION, "applied": self.applied_offset, "nodes": nodes,
               "sessions": sorted([sid, ms] for sid, ms in self._sessions.items())}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_snapshot(cls, data: bytes) -> MetadataTree:
        """The tree :meth:`to_snapshot` wrote; :class:`SnapshotError` if ``data`` is not one."""
        try:
            doc = json.loads(data)
            if doc.get("v") != SNAPSHOT_VERSION:
                raise SnapshotError(f"snapshot version {doc.get('v')!r}; this node reads "
                                    f"version {SNAPSHOT_VERSION}")
            tree = cls()
            tree.applied_offset = int(doc["applied"])
            for sid, ms in doc["sessions"]:
                tree._sessions[int(sid)] = int(ms)
                tree._ephemerals[int(sid)] = set()
            tree._nodes = {}
            for path, value, *numbers in doc["nodes"]:
                tree._nodes[path] = _Node(base64.b64decode(value), *map(int, numbers))
            for path, node in tree._nodes.items():
                if path != "/":
                    tree._nodes[parent_of(path)].children.add(path.rsplit("/", 1)[1])
                if node.owner:
                    tree._ephemerals[node.owner].add(path)
        except SnapshotError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SnapshotError(f"not a metadata tree snapshot: {e!r}") from None
        if "/" not in tree._nodes:
            raise SnapshotError("not a metadata tree snapshot: no root")
        return tree
