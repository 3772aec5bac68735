"""One member of a classic group: what it joined with (its protocols in order of preference,
timeouts, instance id), its assignment, and its outstanding JoinGroup / SyncGroup callbacks.

Invariant: ``awaiting_join`` / ``awaiting_sync`` are None or a callback not yet called; whoever
takes one out of the member calls it exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.purgatory import DelayedOperation
from coordinator.classic.interface import JoinCallback, SyncCallback

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(eq=False)
class ClassicMember:
    """One member of a classic group. ``awaiting_join`` / ``awaiting_sync`` hold the callback
    of its outstanding JoinGroup / SyncGroup (None when it has none)."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    #: KIP-345's ``group.instance.id`` of a static member; None for a dynamic one.
    group_instance_id: str | None = None
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    #: True from its first JoinGroup until the generation it joined is formed.
    is_new: bool = False
    heartbeat_satisfied: bool = False
    heartbeat: DelayedOperation | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (its list is in order of
        preference)."""
        return next(name for name in self.protocol_names() if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True
        return self.heartbeat_satisfied
