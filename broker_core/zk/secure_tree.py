"""``sluice zookeeper secure``: give the znodes of an existing cluster the ACLs that brokers
with ``zookeeper.set.acl=true`` give new ones (or, with ``unsecure``, open them to all again),
like Kafka's ``zookeeper-security-migration``.

The walk covers the cluster's whole chroot, the chroot node included; without a chroot, where
ZooKeeper's root is shared with other applications, only Sluice's own top-level nodes
(:data:`~broker_core.metadata_paths.TOP_LEVEL_PATHS`) and what lies under them. ZooKeeper's own
``/zookeeper`` subtree is never touched. Parents are visited before their children.

Idempotent: a node whose ACL already is the wanted one is left alone (compared as a set: the
order of entries means nothing to ZooKeeper), so a second run changes nothing, and a dry run
lists exactly what a real run would change. Nodes that vanish during the walk (ephemeral
registrations) are skipped; nodes created meanwhile get their ACL from the brokers that create
them, which is why brokers are switched to ``zookeeper.set.acl=true`` before this runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_core import metadata_paths as paths
from broker_core.metadata import NoNode, NotAuthorized
from broker_core.zk.acl_policy import OPEN_ACL, ZOOKEEPER_SYSTEM_PATH, AclEntry, ZkCredential, secure_acl


class SecureTreeError(Exception):
    """The walk cannot go on; the message names the node and says why."""


@dataclass(frozen=True)
class AclChange:
    """One node whose ACL was (or, in a dry run, would be) replaced."""

    path: str
    before: tuple[AclEntry, ...]
    after: tuple[AclEntry, ...]

    def __str__(self) -> str:
        def show(acl: tuple[AclEntry, ...]) -> str:
            return ", ".join(str(e) for e in acl)
        return f"{self.path}: {show(self.before)} -> {show(self.after)}"


def target_acl(credential: ZkCredential, *, unsecure: bool) -> Callable[[str], tuple[AclEntry, ...]]:
    """The ACL each path should have: the brokers' (:func:`secure_acl`), or open to all."""
    if unsecure:
        return lambda path: OPEN_ACL
    return lambda path: secure_acl(path, credential)


async def _roots(store: Any) -> list[str]:
    if store.chroot:
        return ["/"]
    present = []
    for path in paths.TOP_LEVEL_PATHS:
        if await store.exists(path) is not None:
            present.append(path)
    return present


async def secure_tree(store: Any, target: Callable[[str], tuple[AclEntry, ...]], *,
                      apply: bool) -> list[AclChange]:
    """Walk the cluster's nodes (see the module docstring) and return every node whose ACL
    differs from ``target(path)``, in walk order; with ``apply`` set each one's ACL on the
    way. ``store`` is a started ``ZooKeeperStore`` (authenticated with the brokers'
    credential, unless every node is still open). Raises :class:`SecureTreeError` on a node
    this session may not read or change."""
    changes: list[AclChange] = []
    pending = list(reversed(await _roots(store)))
    while pending:
        path = pending.pop()
        if path == ZOOKEEPER_SYSTEM_PATH or path.startswith(ZOOKEEPER_SYSTEM_PATH + "/"):
            continue
        try:
            current = tuple(await store.get_acl(path))
        except NoNode:
            continue  # gone meanwhile (an ephemeral registration): nothing to secure
        except NotAuthorized:
            raise SecureTreeError(f"not allowed to read the ACL of {path}") from None
        wanted = target(path)
        try:
            if set(current) != set(wanted):
                changes.append(AclChange(path, current, wanted))
                if apply:
                    await store.set_acl(path, wanted)
            children = await store.get_children(path)
        except NoNode:
            continue
        except NotAuthorized:
            acl = ", ".join(str(e) for e in current)
            raise SecureTreeError(f"not allowed to change or list {path} (its ACL: {acl}): is "
                                  "--auth-file the brokers' zookeeper.auth.file, and --auth-mechanism "
                                  "their zookeeper.auth.mechanism?") from None
        base = path.rstrip("/")
        pending.extend(f"{base}/{c}" for c in sorted(children, reverse=True))
    return changes
