"""An in-memory ``IMetadataStore`` for unit tests: ZooKeeper's semantics, synchronously.

:class:`MemoryStore` passes the metadata store contract (``tests/support/metadata_store_contract.py``,
run on it by ``tests/unit/test_memory_store.py``) that the ZooKeeper and quorum stores pass, so a
unit test of the controller or the coordinator on it sees what those stores would do: versions,
``cversion`` and sequence suffixes, ephemeral owners, typed errors, all-or-nothing multis that name
the failing operation, and watches that fire on a change of what they watch.

What makes it a test double rather than a store:

- **Synchronous.** Every call returns an already-fired Deferred, and the watches a write triggers
  are called before the write's Deferred is returned, so a test needs no clock to see effects.
- **Open to the test.** :attr:`nodes` maps each path to ``(data, version)``; a test may read it and
  may also change it directly to act as another writer (a changed version makes the next
  conditional write of the code under test fail, as a concurrent writer's would). A watch
  notices such a change at the next write through the store, not at once.
- :attr:`multis` counts write calls (each ``create``/``set``/``delete`` is one multi), and
  :meth:`state` delivers a session state to the listeners as a session event would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from twisted.internet import defer

from broker_core.metadata import (
    BadVersion,
    Check,
    Create,
    Delete,
    NodeExists,
    NoNode,
    NotEmpty,
    RolledBack,
    SessionState,
    SetData,
    Stat,
    TransactionFailed,
)


@dataclass
class _Meta:
    """What ZooKeeper keeps of a node besides its data and version."""

    czxid: int
    mzxid: int
    ephemeral_owner: int = 0
    cversion: int = 0
    created_children: int = 0  # the next sequence suffix (deletes do not move it)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class _NodeTable(dict):
    """``path -> (data, version)`` that also keeps each path's children, so a child list or a
    stat costs the node's children, not a walk over every node. Writes made directly by a test
    (``store.nodes[path] = ...``, ``del store.nodes[path]``) keep the index too."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        self.children: dict[str, set[str]] = {}
        for path, value in dict(*args).items():
            self[path] = value

    def __setitem__(self, path: str, value: tuple[bytes, int]) -> None:
        if path != "/" and path not in self:
            parent, name = path.rsplit("/", 1)
            self.children.setdefault(parent or "/", set()).add(name)
        super().__setitem__(path, value)

    def __delitem__(self, path: str) -> None:
        super().__delitem__(path)
        if path != "/":
            parent, name = path.rsplit("/", 1)
            self.children.get(parent or "/", set()).discard(name)

    def pop(self, path: str, *default: Any) -> Any:
        if path in self:
            value = self[path]
            del self[path]
            return value
        return super().pop(path, *default)

    def clear(self) -> None:
        super().clear()
        self.children.clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        for path, value in dict(*args, **kwargs).items():
            self[path] = value

    def setdefault(self, path: str, default: Any = None) -> Any:
        if path not in self:
            self[path] = default
        return self[path]


class MemoryStore:
    """Nodes in a dict, one session (:attr:`session_id`), watches called synchronously.

    Invariant: every path in :attr:`nodes` other than ``/`` has its parent in :attr:`nodes`
    (writes through the store keep it; a test that writes :attr:`nodes` directly keeps it too).
    """

    session_id = 1

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = _NodeTable({"/": (b"", 0)})
        self.multis = 0
        self.watches: list[SimpleNamespace] = []
        self._meta: dict[str, _Meta] = {"/": _Meta(0, 0)}
        self._zxid = 0
        #: The undo log of the multi being applied (path -> node and meta before it).
        self._undo: dict[str, tuple[tuple[bytes, int] | None, _Meta | None]] = {}
        self._listeners: list[Callable[[SessionState], None]] = []

    # -- lifecycle and sessions ----------------------------------------------------------------

    def start(self) -> defer.Deferred:
        return defer.succeed(None)

    def stop(self) -> defer.Deferred:
        return defer.succeed(None)

    def add_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.append(callback)

    def remove_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def state(self, state: SessionState) -> None:
        """Tell every state listener ``state``, as the store does on a session event (an
        exception of a listener reaches the test)."""
        for callback in list(self._listeners):
            callback(state)

    # -- reads -----------------------------------------------------------------------------------

    def _stat(self, path: str) -> Stat:
        _, version = self.nodes[path]
        meta = self._meta.get(path) or _Meta(0, 0)
        return Stat(version=version, czxid=meta.czxid, mzxid=meta.mzxid,
                    ephemeral_owner=meta.ephemeral_owner,
                    num_children=len(self._children(path)), cversion=meta.cversion)

    def _children(self, path: str) -> list[str]:
        return sorted(self.nodes.children.get(path.rstrip("/") or "/", ()))

    def _read(self, path: str) -> tuple[bytes, Stat] | None:
        if path not in self.nodes:
            return None
        return self.nodes[path][0], self._stat(path)

    def get(self, path: str) -> defer.Deferred:
        got = self._read(path)
        return defer.fail(NoNode(path)) if got is None else defer.succeed(got)

    def get_many(self, paths: Sequence[str]) -> defer.Deferred:
        return defer.succeed([self._read(p) for p in paths])

    def exists(self, path: str) -> defer.Deferred:
        return defer.succeed(self._stat(path) if path in self.nodes else None)

    def get_children(self, path: str) -> defer.Deferred:
        if path not in self.nodes:
            return defer.fail(NoNode(path))
        return defer.succeed(self._children(path))

    # -- writes ----------------------------------------------------------------------------------

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> defer.Deferred:
        if makepath:
            self._make_parents(path)
        return self._single([Create(path, value, ephemeral=ephemeral, sequence=sequence)])

    def set(self, path: str, value: bytes, version: int = -1) -> defer.Deferred:
        return self._single([SetData(path, value, version)])

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> defer.Deferred:
        if recursive and path in self.nodes:
            below = sorted((p for p in self.nodes if p.startswith(path.rstrip("/") + "/")),
                           key=lambda p: -p.count("/"))
            ops = [Delete(p) for p in below] + [Delete(path, version)]
        else:
            ops = [Delete(path, version)]
        return self._single(ops).addCallback(lambda _: None)

    def _single(self, ops: list[Check | Create | SetData | Delete]) -> defer.Deferred:
        """One call's operations as a multi, answered as the call is: the last operation's
        result, or the failing operation's own typed error."""
        def unwrap(failure: Any) -> Any:
            failure.trap(TransactionFailed)
            raise failure.value.first_error
        return self.multi(ops).addCallbacks(lambda results: results[-1], unwrap)

    def ensure_path(self, path: str) -> defer.Deferred:
        self._make_parents(path + "/x")
        return defer.succeed(None)

    def _make_parents(self, path: str) -> None:
        missing = []
        parent = _parent(path)
        while parent not in self.nodes:
            missing.append(parent)
            parent = _parent(parent)
        if missing:
            self.multi([Create(p) for p in reversed(missing)])

    def multi(self, ops: Sequence[Check | Create | SetData | Delete]) -> defer.Deferred:
        """Apply every operation or none; a failure is :class:`TransactionFailed` with the error
        at the failing index and :class:`RolledBack` elsewhere."""
        self.multis += 1
        # An undo log of the paths this multi touches, not a copy of the whole tree: a
        # rollback restores them, and a write costs the same however many nodes exist.
        self._undo = {}
        self._zxid += 1
        results: list[Any] = []
        for i, op in enumerate(ops):
            try:
                results.append(self._apply(op))
            except (NoNode, NodeExists, BadVersion, NotEmpty) as error:
                self._roll_back()
                self._zxid -= 1
                return defer.fail(TransactionFailed(
                    [RolledBack() for _ in ops[:i]] + [error]
                    + [RolledBack() for _ in ops[i + 1:]]))
        self._notify()
        return defer.succeed(results)

    def _touch(self, path: str) -> None:
        """Remember ``path``'s node and meta as they were before this multi changed them."""
        if path not in self._undo:
            meta = self._meta.get(path)
            self._undo[path] = (self.nodes.get(path),
                                None if meta is None else _Meta(**vars(meta)))

    def _roll_back(self) -> None:
        for path, (node, meta) in self._undo.items():
            if node is None:
                self.nodes.pop(path, None)
            else:
                self.nodes[path] = node
            if meta is None:
                self._meta.pop(path, None)
            else:
                self._meta[path] = meta
        self._undo = {}

    def _existing(self, path: str, version: int) -> None:
        if path not in self.nodes:
            raise NoNode(path)
        if version >= 0 and self.nodes[path][1] != version:
            raise BadVersion(path)

    def _apply(self, op: Check | Create | SetData | Delete) -> Any:
        if isinstance(op, Check):
            self._existing(op.path, op.version)
            return True
        if isinstance(op, Create):
            return self._create(op)
        if isinstance(op, SetData):
            self._existing(op.path, op.version)
            self._touch(op.path)
            self.nodes[op.path] = (op.value, self.nodes[op.path][1] + 1)
            self._meta.setdefault(op.path, _Meta(0, 0)).mzxid = self._zxid
            return self._stat(op.path)
        self._existing(op.path, op.version)
        if self._children(op.path):
            raise NotEmpty(op.path)
        self._touch(op.path)
        del self.nodes[op.path]
        self._meta.pop(op.path, None)
        self._child_changed(_parent(op.path), created=False)
        return True

    def _create(self, op: Create) -> str:
        parent = _parent(op.path)
        if parent not in self.nodes:
            raise NoNode(op.path)
        path = op.path
        if op.sequence:
            path += f"{self._meta.setdefault(parent, _Meta(0, 0)).created_children:010d}"
        if path in self.nodes:
            raise NodeExists(path)
        self._touch(path)
        self.nodes[path] = (op.value, 0)
        self._meta[path] = _Meta(self._zxid, self._zxid,
                                 ephemeral_owner=self.session_id if op.ephemeral else 0)
        self._child_changed(parent, created=True)
        return path

    def _child_changed(self, parent: str, created: bool) -> None:
        self._touch(parent)
        meta = self._meta.setdefault(parent, _Meta(0, 0))
        meta.cversion += 1
        if created:
            meta.created_children += 1

    # -- watches ---------------------------------------------------------------------------------

    def watch_data(self, path: str, callback: Callable[[bytes | None, Stat | None], None]
                   ) -> SimpleNamespace:
        """Calls ``callback(data, stat)`` now and whenever the node's data or version changes
        (``(None, None)`` while it does not exist)."""
        return self._watch("data", path, callback)

    def watch_children(self, path: str, callback: Callable[[list[str] | None], None]
                       ) -> SimpleNamespace:
        """Calls ``callback(children)`` now and whenever the child list changes (``None`` while
        the node does not exist)."""
        return self._watch("children", path, callback)

    def _watch(self, kind: str, path: str, callback: Callable[..., None]) -> SimpleNamespace:
        watch = SimpleNamespace(kind=kind, path=path, callback=callback, seen=object())
        watch.cancel = lambda: watch in self.watches and self.watches.remove(watch)
        self.watches.append(watch)
        self._deliver(watch)
        return watch

    def _current(self, watch: SimpleNamespace) -> Any:
        if watch.kind == "data":
            return self.nodes.get(watch.path)
        return self._children(watch.path) if watch.path in self.nodes else None

    def _deliver(self, watch: SimpleNamespace) -> None:
        now = self._current(watch)
        if now == watch.seen:
            return
        watch.seen = now
        if watch.kind == "data":
            got = self._read(watch.path)
            watch.callback(*(got if got is not None else (None, None)))
        else:
            watch.callback(now)

    def _notify(self) -> None:
        for watch in list(self.watches):
            if watch in self.watches:  # an earlier callback may have cancelled it
                self._deliver(watch)


class HeldMultiStore(MemoryStore):
    """A :class:`MemoryStore` whose multis wait until the test releases them, in order (to
    hold a write in flight while something else happens: ``held``, ``release``)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[list, defer.Deferred]] = []

    def multi(self, ops):
        d: defer.Deferred = defer.Deferred()
        self.held.append((ops, d))
        return d

    def release(self) -> None:
        held, self.held = self.held, []
        for ops, d in held:
            MemoryStore.multi(self, ops).chainDeferred(d)
