"""ACL bindings in the metadata store (ZooKeeper or the quorum), and each broker's cache of them.

Layout (``broker_core.metadata_paths``): one persistent node per pattern,
``/acls/<Topic|Group|Cluster>/<literal|prefixed>/<name>``, holding every entry of that
pattern as Kafka's ``/kafka-acl`` JSON. A write is a read-modify-write of one node, made
conditional on the version it read, so two admins adding entries to one pattern at once both
land; a node whose last entry goes is deleted.

Every value is validated on read: an entry that does not parse is logged and left out (the
pattern's other entries stay), a node that is not JSON at all is logged and ignored; a broker
never fails on what another wrote. A node holds at most :data:`MAX_ENTRIES` entries and
:data:`MAX_VALUE_BYTES` bytes (writes beyond are refused, reads beyond are ignored).

:class:`AclCache` keeps an :class:`~broker_core.security.acl.Authorizer` equal to the store:
a children watch on each of the six pattern directories and a data watch on each pattern.
Until the first answers arrive the authorizer holds no bindings, so it refuses everyone but
super users (or allows everyone if ``allow.everyone.if.no.acl.found``, where a DENY not yet
read would be missed): :meth:`AclCache.start` therefore returns a Deferred that fires once
every directory and every binding listed in it have been read once, and a broker opens its
listeners only after it fired.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import BadVersion, NodeExists, NoNode
from broker_core.security.acl import (
    AccessEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    InvalidAcl,
    PatternType,
    ResourcePattern,
    ResourceType,
    group_by_pattern,
)

log = Logger(namespace="sluice.acl")

#: Most entries one pattern's node may hold.
MAX_ENTRIES = 1000
#: Largest value of one pattern's node (well under ZooKeeper's 1 MiB default).
MAX_VALUE_BYTES = 512 * 1024
#: How often a conditional write is retried when another writer got there first.
WRITE_ATTEMPTS = 20

_TYPE_DIRS = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
              ResourceType.CLUSTER: "Cluster"}
_PATTERN_DIRS = {PatternType.LITERAL: "literal", PatternType.PREFIXED: "prefixed"}
#: Every pattern directory: (resource type, pattern type, path).
DIRECTORIES = tuple((rt, pt, paths.acl_patterns(td, pd))
                    for rt, td in _TYPE_DIRS.items() for pt, pd in _PATTERN_DIRS.items())


def _camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


_OP_TEXT = {op: _camel(op.name) for op in AclOperation}
_OP_FROM_TEXT = {v: k for k, v in _OP_TEXT.items()}
_PERM_TEXT = {p: _camel(p.name) for p in AclPermission}
_PERM_FROM_TEXT = {v: k for k, v in _PERM_TEXT.items()}


class AclStoreError(Exception):
    """A write that could not be made (too many entries, or lost races); says why."""


def node_path(pattern: ResourcePattern) -> str:
    return paths.acl_resource(_TYPE_DIRS[pattern.resource_type],
                              _PATTERN_DIRS[pattern.pattern_type], pattern.name)


def encode_entries(entries: Iterable[AccessEntry]) -> bytes:
    acls = [{"principal": e.principal, "host": e.host, "operation": _OP_TEXT[e.operation],
             "permissionType": _PERM_TEXT[e.permission]}
            for e in sorted(set(entries), key=lambda e: (e.principal, e.host, e.operation,
                                                         e.permission))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":"),
                      sort_keys=True).encode()


def decode_entries(data: bytes, where: str) -> list[AccessEntry]:
    """The valid entries of a pattern's node; every invalid one is logged and left out.
    Raises ValueError when the node as a whole is unusable (not JSON, wrong shape, too big)."""
    if len(data) > MAX_VALUE_BYTES:
        raise ValueError(f"{len(data)} bytes, more than {MAX_VALUE_BYTES}")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not valid JSON ({e})") from None
    if not isinstance(value, dict) or value.get("version") != 1 or \
            not isinstance(value.get("acls"), list):
        raise ValueError('not {"version":1,"acls":[...]}')
    if len(value["acls"]) > MAX_ENTRIES:
        raise ValueError(f"{len(value['acls'])} entries, more than {MAX_ENTRIES}")
    out = []
    for raw in value["acls"]:
        try:
            if not isinstance(raw, dict):
                raise InvalidAcl("an entry is not an object")
            fields = [raw.get(k) for k in ("principal", "host")]
            if not all(isinstance(f, str) for f in fields):
                raise InvalidAcl("principal and host must be strings")
            op = _OP_FROM_TEXT.get(raw.get("operation"))  # type: ignore[arg-type]
            perm = _PERM_FROM_TEXT.get(raw.get("permissionType"))  # type: ignore[arg-type]
            if op is None or perm is None:
                raise InvalidAcl(f"unknown operation or permission in {raw!r}")
            entry = AccessEntry(fields[0], fields[1], op, perm)
            entry.validate()
        except InvalidAcl as e:
            log.warn("ignoring an invalid ACL entry in {where}: {e}", where=where, e=e)
            continue
        out.append(entry)
    return out


# -- reads and writes (admin tools and the ACL APIs) ------------------------------------------


async def _read(store: Any, path: str) -> tuple[list[AccessEntry], int] | None:
    """The entries of a node and its version, or None when absent. A node that does not parse
    reads as empty (at its version), so a write replaces it."""
    try:
        data, stat = await store.get(path)
    except NoNode:
        return None
    try:
        return decode_entries(data, path), stat.version
    except ValueError as e:
        log.warn("ACL node {p} is unusable and will be replaced by the next write: {e}",
                 p=path, e=e)
        return [], stat.version


async def _update(store: Any, pattern: ResourcePattern, change: Any) -> list[AccessEntry]:
    """Read-modify-write the node of ``pattern``: ``change(entries) -> new entries``; returns
    the entries it had before the write that landed."""
    path = node_path(pattern)
    for _ in range(WRITE_ATTEMPTS):
        current = await _read(store, path)
        before = [] if current is None else current[0]
        after = sorted(set(change(before)), key=lambda e: (e.principal, e.host, e.operation,
                                                            e.permission))
        if len(after) > MAX_ENTRIES:
            raise AclStoreError(f"{pattern} would hold {len(after)} entries; the limit is "
                                f"{MAX_ENTRIES}")
        try:
            if current is None:
                if after:
                    await store.create(path, encode_entries(after), makepath=True)
            elif not after:
                await store.delete(path, version=current[1])
            elif set(after) != set(before):
                await store.set(path, encode_entries(after), version=current[1])
            return before
        except (BadVersion, NodeExists, NoNode):
            continue  # another writer got there first: read again
    raise AclStoreError(f"{pattern} kept changing under {WRITE_ATTEMPTS} attempts to write it")


async def create_acls(store: Any, bindings: Sequence[AclBinding]) -> None:
    """Store every binding (each already validated); adding one that exists changes nothing."""
    for pattern, entries in group_by_pattern(bindings).items():
        await _update(store, pattern, lambda before, entries=entries: [*before, *entries])


async def load_acls(store: Any) -> list[AclBinding]:
    """Every valid binding in the store, read now (not from a cache)."""
    out = []
    for rt, pt, directory in DIRECTORIES:
        try:
            names = await store.get_children(directory)
        except NoNode:
            continue
        for name in sorted(names):
            pattern = ResourcePattern(rt, pt, name)
            try:
                pattern.validate()
            except InvalidAcl as e:
                log.warn("ignoring ACL node {p}: {e}", p=node_path(pattern), e=e)
                continue
            current = await _read(store, node_path(pattern))
            if current is not None:
                out.extend(AclBinding(pattern, e) for e in current[0])
    return out


async def delete_acls(store: Any, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
    """Delete every binding any filter matches; returns, per filter, the bindings it deleted
    (a binding two filters match is reported under the first)."""
    found: list[list[AclBinding]] = [[] for _ in filters]
    patterns = {b.pattern for b in await load_acls(store) if any(f.matches(b) for f in filters)}
    for pattern in sorted(patterns, key=str):
        def drop(before: list[AccessEntry], pattern: ResourcePattern = pattern
                 ) -> list[AccessEntry]:
            return [e for e in before
                    if not any(f.matches(AclBinding(pattern, e)) for f in filters)]

        before = await _update(store, pattern, drop)
        for e in before:
            b = AclBinding(pattern, e)
            for i, f in enumerate(filters):
                if f.matches(b):
                    found[i].append(b)
                    break
    return found


# -- every broker's cache ---------------------------------------------------------------------


class AclCache:
    """Keeps ``authorizer`` equal to the ACLs in ``store`` through watches (module docstring)."""

    def __init__(self, store: Any, authorizer: Authorizer) -> None:
        self.store = store
        self.authorizer = authorizer
        self._dir_watches: list[Any] = []
        self._node_watches: dict[ResourcePattern, Any] = {}
        self._stopped = False
        # The first load: directories listed once, patterns listed but not read yet.
        self._ready: defer.Deferred | None = None
        self._listed: set[tuple[ResourceType, PatternType]] = set()
        self._pending: set[ResourcePattern] = set()

    def start(self) -> defer.Deferred:
        """Watch the store. The Deferred fires once every directory has been listed and every
        pattern listed has been read once (the authorizer then holds what the store held)."""
        self._ready = defer.Deferred()
        for rt, pt, directory in DIRECTORIES:
            self._dir_watches.append(self.store.watch_children(
                directory, lambda children, rt=rt, pt=pt: self._children(rt, pt, children)))
        return self._ready

    def _check_ready(self) -> None:
        if (self._ready is not None and len(self._listed) == len(DIRECTORIES)
                and not self._pending):
            ready, self._ready = self._ready, None
            ready.callback(None)

    def stop(self) -> None:
        self._stopped = True
        for w in self._dir_watches:
            w.cancel()
        for w in self._node_watches.values():
            w.cancel()
        self._dir_watches.clear()
        self._node_watches.clear()

    def _children(self, rt: ResourceType, pt: PatternType, children: list[str] | None) -> None:
        if self._stopped:
            return
        wanted = set(children or ())
        for pattern in [p for p in self._node_watches
                        if p.resource_type is rt and p.pattern_type is pt
                        and p.name not in wanted]:
            self._node_watches.pop(pattern).cancel()
            self._pending.discard(pattern)
            self.authorizer.replace_resource(pattern, ())
        for name in sorted(wanted):
            pattern = ResourcePattern(rt, pt, name)
            if pattern in self._node_watches:
                continue
            try:
                pattern.validate()
            except InvalidAcl as e:
                log.warn("ignoring ACL node {p}: {e}", p=node_path(pattern), e=e)
                continue
            self._pending.add(pattern)
            self._node_watches[pattern] = self.store.watch_data(
                node_path(pattern), lambda data, stat, pattern=pattern: self._data(pattern, data))
        self._listed.add((rt, pt))
        self._check_ready()

    def _data(self, pattern: ResourcePattern, data: bytes | None) -> None:
        if self._stopped:
            return
        if data is None:
            self.authorizer.replace_resource(pattern, ())
        else:
            try:
                entries = decode_entries(data, node_path(pattern))
            except ValueError as e:
                log.warn("ignoring ACL node {p}: {e}", p=node_path(pattern), e=e)
                entries = []
            self.authorizer.replace_resource(pattern, entries)
        self._pending.discard(pattern)
        self._check_ready()
