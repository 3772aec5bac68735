"""The errors :class:`~broker_core.raft.node.RaftNode` raises, in a module of their own so the
role modules under :mod:`broker_core.raft.node_roles` can raise them without importing the
node."""

from __future__ import annotations

from broker_core.raft.messages import NO_LEADER
from broker_core.raft.roles import Role


class NotLeaderError(Exception):
    """:meth:`RaftNode.propose` on a node that is not the leader; names the leader it knows."""

    def __init__(self, node_id: int, role: Role, leader_id: int, epoch: int) -> None:
        super().__init__(f"node {node_id} is {role.value} in epoch {epoch}, not the leader "
                         f"(known leader: {leader_id if leader_id != NO_LEADER else 'none'})")
        self.leader_id = leader_id
        self.epoch = epoch


class RaftSafetyError(RuntimeError):
    """A peer asked for something only a broken quorum could ask, such as truncating below
    the high watermark. The node refuses rather than lose committed entries."""
