"""What a quorum node knows of the others, gossiped with DiscoverBrokers (the quorum's
gossip, docs/design.md#bootstrapping), sans-IO.

A :class:`Directory` holds the node's own endpoint, every other node's endpoint it has heard
of, and the newest quorum state it has heard of (:class:`QuorumView`: cluster id, leader,
epoch, voters). A DiscoverBrokers exchange carries both sides' directories; each side merges
the other's with :meth:`Directory.merge`.

Invariants (a node only accepts monotonically increasing updates):

- a node's endpoint is replaced only by one with a **higher boot time** (a restarted node may
  come back at another address; an older report of it never undoes a newer one);
- the quorum view is replaced only by one with a higher ``(leader_epoch, voters_offset,
  leader known)``: voter states are ordered by epoch, and since a reassignment changes the
  voters within an epoch, the offset of the voter assignment they come from breaks ties; and
  a view that knows the epoch's leader beats one of the same epoch and offset that does not
  (an epoch has at most one leader, and a node learns it after it learned the epoch: without
  this, a view taken during an election kept "no leader" for the whole epoch);
- a view of another cluster is never merged (:class:`ClusterMismatch`), and the cluster id,
  once known, never changes;
- the directory's own endpoint is never replaced by what others say of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NO_NODE = -1


class ClusterMismatch(Exception):
    """A DiscoverBrokers peer belongs to another cluster."""


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """Where a node's quorum listener is, as of the node's start at ``boot_time_ms``."""

    node_id: int
    host: str
    port: int
    boot_time_ms: int


@dataclass(frozen=True, slots=True)
class QuorumView:
    """The quorum state as some node knew it.

    - ``cluster_id``: ``None`` before the node knows one (a fresh node started without one);
    - ``leader_id``: -1 when no leader is known; ``leader_epoch``: -1 when nothing is known;
    - ``voters_offset``: the log offset of the voter assignment ``voter_ids`` comes from, -1
      for the bootstrap voters (``quorum.voters``).
    """

    cluster_id: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    voters_offset: int = -1
    voter_ids: tuple[int, ...] = ()

    @property
    def order(self) -> tuple[int, int, bool]:
        return (self.leader_epoch, self.voters_offset, self.leader_id >= 0)


@dataclass(frozen=True, slots=True)
class Gossip:
    """One side of a DiscoverBrokers exchange: the sender, the others it knows, its view."""

    node: NodeEndpoint
    brokers: tuple[NodeEndpoint, ...]
    view: QuorumView


@dataclass
class Directory:
    """See the module docstring."""

    me: NodeEndpoint
    view: QuorumView = field(default_factory=QuorumView)
    nodes: dict[int, NodeEndpoint] = field(default_factory=dict)

    def learn_node(self, endpoint: NodeEndpoint) -> bool:
        """Keep ``endpoint`` if it is news (an unknown node, or a later boot); True if kept."""
        if endpoint.node_id in (self.me.node_id, NO_NODE) or endpoint.node_id < 0:
            return False
        known = self.nodes.get(endpoint.node_id)
        if known is not None and known.boot_time_ms >= endpoint.boot_time_ms:
            return False
        self.nodes[endpoint.node_id] = endpoint
        return True

    def check_cluster(self, view: QuorumView) -> None:
        """Raise :class:`ClusterMismatch` if ``view`` is another cluster's; merge nothing."""
        ours = self.view.cluster_id
        if view.cluster_id is not None and ours is not None and view.cluster_id != ours:
            raise ClusterMismatch(f"a node of cluster {view.cluster_id!r} answered; this node "
                                  f"belongs to {ours!r}")

    def learn_view(self, view: QuorumView) -> bool:
        """Keep ``view`` if it is newer than ours; True if kept. Raises
        :class:`ClusterMismatch` for another cluster's view."""
        self.check_cluster(view)
        ours = self.view.cluster_id
        cluster_id = ours if ours is not None else view.cluster_id
        if view.order > self.view.order:
            self.view = QuorumView(cluster_id, view.leader_id, view.leader_epoch,
                                   view.voters_offset, tuple(sorted(view.voter_ids)))
            return True
        if cluster_id != ours:
            self.view = QuorumView(cluster_id, self.view.leader_id, self.view.leader_epoch,
                                   self.view.voters_offset, self.view.voter_ids)
            return True
        return False

    def merge(self, gossip: Gossip) -> set[int]:
        """Merge what a peer told; returns the ids of the nodes whose endpoint is new. The
        view is checked first, so another cluster's nodes are never learned."""
        self.learn_view(gossip.view)
        return {e.node_id for e in (gossip.node, *gossip.brokers) if self.learn_node(e)}

    def gossip(self) -> Gossip:
        """What this node tells a peer."""
        return Gossip(self.me, tuple(self.nodes[n] for n in sorted(self.nodes)), self.view)

    def endpoint(self, node_id: int) -> NodeEndpoint | None:
        return self.me if node_id == self.me.node_id else self.nodes.get(node_id)

    def missing_voters(self) -> set[int]:
        """The voters of the view whose endpoint this node does not know (start step 3.1: keep
        asking while there are any)."""
        return {v for v in self.view.voter_ids if self.endpoint(v) is None}


# -- wire bodies (broker_core/wire/messages/discover_brokers.py) --------------------------------


def _node_body(e: NodeEndpoint) -> dict[str, Any]:
    return {"node_id": e.node_id, "host": e.host, "port": e.port,
            "boot_time_ms": e.boot_time_ms}


def _node_from(s: Any) -> NodeEndpoint:
    return NodeEndpoint(s.node_id, s.host, s.port, s.boot_time_ms)


def gossip_body(g: Gossip, *, response: bool = False) -> dict[str, Any]:
    """The request body (or, with ``response``, the response body) carrying ``g``."""
    body: dict[str, Any] = {
        "node": _node_body(g.node), "brokers": [_node_body(e) for e in g.brokers],
        "cluster_id": g.view.cluster_id, "leader_id": g.view.leader_id,
        "leader_epoch": g.view.leader_epoch, "voters_offset": g.view.voters_offset,
        "voter_ids": list(g.view.voter_ids)}
    if response:
        body["error_code"] = 0
    return body


def gossip_from_body(body: Any) -> Gossip:
    """The :class:`Gossip` a decoded request or response body carries."""
    return Gossip(_node_from(body.node), tuple(_node_from(s) for s in body.brokers),
                  QuorumView(body.cluster_id, body.leader_id, body.leader_epoch,
                             body.voters_offset, tuple(body.voter_ids)))
