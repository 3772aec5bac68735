"""The self-managed metadata quorum (seed 002 on KIP-595): a sans-IO Raft core.

Nothing here imports Twisted or touches a socket or a clock. :class:`RaftNode` takes messages,
ticks and proposals and returns :class:`Effects` (state to persist, messages to send, entries
appended, commits); the network driver and the storage adapter over :mod:`broker_core.log`
are later steps (docs/raft.md).

The metadata store on top: ``metadata_tree`` (the replicated state machine) and
``metadata_sessions`` are sans-IO too; ``metadata_store`` (``IMetadataStore`` on the quorum) is
the one module of the package on Twisted, and is not imported here.
"""

from broker_core.raft.config import RaftConfig, RaftConfigError
from broker_core.raft.effects import Effects, Transition
from broker_core.raft.entries import LeaderChange, LogEntry, VoterAssignment
from broker_core.raft.log import InMemoryRaftLog, IRaftLog, LogInvariantError
from broker_core.raft.node import NotLeaderError, RaftNode, RaftSafetyError
from broker_core.raft.quorum_state import (
    QuorumState,
    QuorumStateError,
    read_quorum_state,
    write_quorum_state,
)
from broker_core.raft.roles import TRANSITIONS, IllegalStateTransition, Role

__all__ = [
    "TRANSITIONS",
    "Effects",
    "IRaftLog",
    "IllegalStateTransition",
    "InMemoryRaftLog",
    "LeaderChange",
    "LogEntry",
    "LogInvariantError",
    "NotLeaderError",
    "QuorumState",
    "QuorumStateError",
    "RaftConfig",
    "RaftConfigError",
    "RaftNode",
    "RaftSafetyError",
    "Role",
    "Transition",
    "VoterAssignment",
    "read_quorum_state",
    "write_quorum_state",
]
