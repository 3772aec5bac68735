"""Store-neutral types of the metadata store seam: node stats, multi operations, errors and
session states. Neither kazoo nor Twisted is imported here; ZooKeeper's implementation
(:mod:`broker_core.zk.store`) translates into these, and the Raft quorum's will too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Stat:
    version: int
    czxid: int
    mzxid: int = 0
    ctime: int = 0
    mtime: int = 0
    ephemeral_owner: int = 0
    num_children: int = 0
    cversion: int = 0


@dataclass(frozen=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True)
class Create:
    path: str
    value: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


class MetadataStoreError(Exception):
    """Base of every metadata-store error."""


class NoNode(MetadataStoreError):
    pass


class NodeExists(MetadataStoreError):
    pass


class BadVersion(MetadataStoreError):
    pass


class NotEmpty(MetadataStoreError):
    pass


class ConnectionLost(MetadataStoreError):
    pass


class StoreStopping(ConnectionLost):
    """The operation was abandoned because the store's owner is stopping (a broker's last
    writes get a short wait, not a long one); as with any lost connection, a write may or may
    not have applied."""


class SessionExpired(MetadataStoreError):
    pass


class NotAuthorized(MetadataStoreError):
    """The store refused the operation to this session's identity (ZooKeeper's NoAuth: a
    node's ACL does not grant it); nothing changed."""


class AuthFailed(MetadataStoreError):
    """The store refused this process's login (ZooKeeper's AUTH_FAILED: a SASL credential it
    does not accept) and closed the session; retrying with the same credential cannot help."""


class RolledBack(MetadataStoreError):
    """Placeholder result of a multi operation that was not applied because another failed."""


@dataclass
class TransactionFailed(MetadataStoreError):
    """A multi failed atomically; ``results`` holds one result or exception per operation."""

    results: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(f"multi failed: {self.first_error!r}")

    @property
    def first_error(self) -> Exception | None:
        for r in self.results:
            if isinstance(r, Exception) and not isinstance(r, RolledBack):
                return r
        return None

    @property
    def failed_index(self) -> int | None:
        for i, r in enumerate(self.results):
            if isinstance(r, Exception) and not isinstance(r, RolledBack):
                return i
        return None


class SessionState(Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


class SessionStateListeners:
    """The state listeners of a metadata store (``add_state_listener`` /
    ``remove_state_listener`` of ``IMetadataStore``), shared by its implementations.

    :meth:`notify` calls each listener registered when the call starts, in order; a listener
    that raises is logged through ``log.failure`` (a Twisted ``Logger``) and does not stop the
    others."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[SessionState], None]] = []

    def add(self, callback: Callable[[SessionState], None]) -> None:
        self._callbacks.append(callback)

    def remove(self, callback: Callable[[SessionState], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def notify(self, state: SessionState, log: Any) -> None:
        for cb in list(self._callbacks):
            try:
                cb(state)
            except Exception:
                log.failure("session state listener failed")
