"""What the classic groups take in and hand back: their configuration, the JoinGroup and
SyncGroup answers (given to callbacks, each called exactly once) and the DescribeGroups
summaries. Plain values: no state, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_core.wire.errors import ErrorCode


@dataclass(frozen=True)
class ClassicGroupConfig:
    """The broker keys the classic groups use (docs/configuration.md), in milliseconds."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 1000


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer. ``members`` (member id, group instance id, protocol metadata) is
    filled only for the leader."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment (opaque bytes)."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberSummary, ...]


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]
