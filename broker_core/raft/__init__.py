"""The self-managed metadata quorum (on KIP-595): a sans-IO Raft core.

Nothing here imports Twisted or touches a socket or a clock. :class:`RaftNode` takes messages,
ticks and proposals and returns :class:`Effects` (state to persist, messages to send, entries
appended, commits). :class:`DiskRaftLog` keeps the log on disk over :mod:`broker_core.log`.

The modules on Twisted are not re-exported here: the network driver
(:mod:`broker_core.raft.driver` (``RaftDriver``), :mod:`~broker_core.raft.listener`,
:mod:`~broker_core.raft.transport`, :mod:`~broker_core.raft.service` (``QuorumNode``) and
``python -m broker_core.raft``) and :mod:`~broker_core.raft.metadata_store`
(``IMetadataStore`` on the quorum). The store's state machine, ``metadata_tree``, and
``metadata_sessions`` are sans-IO like the core.
"""

from broker_core.config.quorum import RaftConfig, RaftConfigError
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
from broker_core.raft.records import RaftRecordError, entries_to_records, records_to_entries
from broker_core.raft.roles import TRANSITIONS, IllegalStateTransition, Role
from broker_core.raft.storage import DiskRaftLog

__all__ = [
    "TRANSITIONS",
    "DiskRaftLog",
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
    "RaftRecordError",
    "RaftSafetyError",
    "Role",
    "Transition",
    "VoterAssignment",
    "entries_to_records",
    "read_quorum_state",
    "records_to_entries",
    "write_quorum_state",
]
