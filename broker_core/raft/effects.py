"""What one step of a :class:`~broker_core.raft.node.RaftNode` asks of its driver.

The driver applies a step's :class:`Effects` in this order, and the order is the contract:

1. ``quorum_state``: write it durably (``write_quorum_state``) — a granted vote or a new
   epoch must survive a crash before any message that reveals it leaves, or a restarted node
   could vote twice in one epoch;
2. ``flush_log``: flush the log — a follower's next fetch offset tells the leader the entries
   are replicated, and a leader counts its own log end toward the majority;
3. ``messages``: send them;
4. ``appended`` / ``truncated_to`` / ``installed_snapshot`` / ``high_watermark`` /
   ``transitions``: tell the layers above (the metadata store applies entries up to the high
   watermark; an installed snapshot replaces its state first).

A snapshot installed from the leader was saved in its store and the log reset to its end
within the step (both durable when they return, as the quorum state's write is), before any
message of the step leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.raft.entries import LogEntry
from broker_core.raft.messages import Envelope
from broker_core.raft.quorum_state import QuorumState
from broker_core.raft.roles import Role
from broker_core.raft.snapshots import Snapshot


@dataclass(frozen=True, slots=True)
class Transition:
    """One role change: ``from_role`` in ``from_epoch`` to ``to_role`` in ``to_epoch``."""

    from_role: Role
    from_epoch: int
    to_role: Role
    to_epoch: int
    leader_id: int


@dataclass(slots=True)
class Effects:
    """The outputs of one step; see the module docstring for the order they apply in.

    - ``quorum_state``: the state to persist, or ``None`` if it did not change.
    - ``flush_log``: the log changed and must be flushed before ``messages`` are sent.
    - ``messages``: envelopes to send.
    - ``appended``: entries appended, in order (after any truncation of the same step).
    - ``truncated_to``: the lowest offset the log was truncated to in this step, or ``None``.
    - ``high_watermark``: the new high watermark if it advanced.
    - ``transitions``: role changes, in order.
    - ``proposed``: the entry a successful :meth:`RaftNode.propose` appended.
    - ``installed_snapshot``: a snapshot fetched from the leader (FetchSnapshot) that now
      stands for every entry below its end: the state machine loads it, and committed entries
      continue from its end. Entries ``appended`` in the same step come after it.
    """

    quorum_state: QuorumState | None = None
    flush_log: bool = False
    messages: list[Envelope] = field(default_factory=list)
    appended: list[LogEntry] = field(default_factory=list)
    truncated_to: int | None = None
    high_watermark: int | None = None
    transitions: list[Transition] = field(default_factory=list)
    proposed: LogEntry | None = None
    installed_snapshot: Snapshot | None = None
