"""One quorum node on the network: the listener, the connections to its peers and the driver,
started and stopped together.

Order matters at both ends. Start: bind the listener first (so a port of 0 can be learned
before the voters' addresses are known), then open the peer connections, then start the
driver, which may send at once. Stop: stop the driver (a leader resigns gracefully first,
handing its EndQuorumEpoch requests to the still-open connections), then close the listener,
the accepted connections and the peer connections.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.task import deferLater
from twisted.logger import Logger

from broker_core.raft import wire
from broker_core.raft.config import RaftConfig, VoterAddress
from broker_core.raft.discovery import Directory, NodeEndpoint, QuorumView
from broker_core.raft.driver import RaftDriver
from broker_core.raft.gossip import GossipClient
from broker_core.raft.listener import InboundRequests, QuorumListenerFactory, QuorumRequestHandler
from broker_core.raft.listener_admin import GossipHandler
from broker_core.raft.log import IRaftLog
from broker_core.raft.transport import QuorumNetwork


def records_codec() -> tuple[wire.EntriesToRecords | None, wire.RecordsToEntries | None]:
    """The mapping of log entries to RecordBatch bytes (:mod:`broker_core.raft.records`), or
    ``(None, None)`` where it is not available: fetch responses then carry no entries."""
    try:
        from broker_core.raft import records  # noqa: PLC0415 (optional part)
    except ImportError:
        return None, None
    return records.entries_to_records, records.records_to_entries


class QuorumNode:
    """A :class:`RaftDriver` with its listener and peer connections.

    Usage: ``port = await node.listen(host, port)``, then ``node.start(voters)``, and
    ``await node.stop()``. With ``bootstrap_servers`` the node gossips (DiscoverBrokers,
    :mod:`broker_core.raft.gossip`): ``await node.discover_quorum()`` before ``start`` learns
    the cluster id, the voters and their endpoints when the node was given none, and every
    node it learns of later is connected to (:meth:`QuorumNetwork.set_peer`). The listener
    answers DiscoverBrokers from :attr:`directory` whether or not the node has bootstrap servers.
    """

    log = Logger(namespace="sluice.raft")

    def __init__(self, node_id: int, cluster_id: str | None, raft_log: IRaftLog,
                 data_dir: Path | str, config: RaftConfig, reactor: Any,
                 rng: random.Random | None = None, persist_thread: bool = False,
                 bootstrap_servers: list[tuple[str, int]] | None = None) -> None:
        self.node_id = node_id
        self.persist_thread = persist_thread
        self.cluster_id = cluster_id
        self.raft_log = raft_log
        self.data_dir = Path(data_dir)
        self.config = config
        self.reactor = reactor
        self._rng = rng
        self.entries_to_records, self.records_to_entries = records_codec()
        self.inbound = InboundRequests(node_id)
        self.handler = QuorumRequestHandler(self.inbound, reactor,
                                            config.request_timeout_ms / 1000,
                                            self.entries_to_records)
        self.factory = QuorumListenerFactory(self.handler, clock=reactor)
        self.port: Any = None
        self.network: QuorumNetwork | None = None
        self.driver: RaftDriver | None = None
        self.bootstrap_servers = list(bootstrap_servers or [])
        self.directory: Directory | None = None  # what DiscoverBrokers tells (after listen)
        self.gossip: GossipClient | None = None
        self.boot_time_ms = int(reactor.seconds() * 1000)
        self._gossiping = False

    async def listen(self, host: str, port: int) -> int:
        """Bind the quorum listener; returns the bound port."""
        endpoint_type = TCP6ServerEndpoint if ":" in host else TCP4ServerEndpoint
        self.port = await endpoint_type(self.reactor, port, interface=host).listen(self.factory)
        bound = self.port.getHost().port
        self.directory = Directory(NodeEndpoint(self.node_id, host, bound, self.boot_time_ms),
                                   QuorumView(self.cluster_id))
        self.handler.gossip = GossipHandler(self.directory, self._learned)
        if self.bootstrap_servers:
            self.gossip = GossipClient(self.directory, self.bootstrap_servers, self.reactor,
                                       self.config.request_timeout_ms / 1000,
                                       on_learned=self._learned)
        return bound

    async def discover_quorum(self, poll_s: float = 0.05) -> QuorumView:
        """Ask the bootstrap servers (DiscoverBrokers) until this node knows the cluster id,
        the voters and every voter's endpoint (seed 002's steps 3 and 3.1); returns that view.
        Runs until then: a quorum that cannot be found is waited for (logged)."""
        if self.gossip is None or self.directory is None:
            raise RuntimeError("listen() with bootstrap servers first")
        self._start_gossip()
        directory = self.directory
        waited = 0.0
        while (directory.view.cluster_id is None or not directory.view.voter_ids
               or directory.missing_voters()):
            await deferLater(self.reactor, poll_s)
            waited += poll_s
            if waited >= 10.0:
                waited = 0.0
                self.log.warn("quorum node {node} still looking for the quorum through {servers}",
                              node=self.node_id, servers=self.bootstrap_servers)
        if self.cluster_id is None:
            self.cluster_id = directory.view.cluster_id
        return directory.view

    def voter_addresses(self) -> dict[int, VoterAddress]:
        """The addresses of the voters this node knows of (its directory's view)."""
        if self.directory is None:
            return {}
        return {v: VoterAddress(v, e.host, e.port)
                for v in self.directory.view.voter_ids
                if (e := self.directory.endpoint(v)) is not None}

    def _start_gossip(self) -> None:
        if self.gossip is not None and not self._gossiping:
            self._gossiping = True
            self.gossip.start()

    def start(self, voters: dict[int, VoterAddress],
              peers: dict[int, VoterAddress] | None = None) -> RaftDriver:
        """Open the peer connections and start the driver (after :meth:`listen`).

        ``voters`` is the bootstrap voter set with addresses (a node not in it starts as an
        observer); ``peers`` are the addresses of other nodes that may become voters by a
        reassignment: the node needs them to fetch from, vote for or lead them."""
        if self.port is None or self.directory is None:
            raise RuntimeError("listen() first")
        if self.cluster_id is None:
            raise RuntimeError("no cluster id: give one or discover_quorum() first")
        addresses = {**(peers or {}), **voters}
        # What the configuration says is the oldest knowledge (boot time 0): anything a node
        # reports of itself through DiscoverBrokers replaces it. A discovered view is kept.
        self.directory.learn_view(QuorumView(self.cluster_id,
                                             voter_ids=tuple(sorted(voters))))
        if not self.directory.view.voter_ids:
            self.directory.view = QuorumView(self.cluster_id, voter_ids=tuple(sorted(voters)))
        for a in addresses.values():
            self.directory.learn_node(NodeEndpoint(a.node_id, a.host, a.port, 0))
        # Every node the directory knows, configured or discovered before the start.
        addresses = {n: VoterAddress(n, e.host, e.port) for n, e in self.directory.nodes.items()}
        self.network = QuorumNetwork(self.node_id, addresses, self.reactor,
                                     self.config.request_timeout_ms / 1000, self.inbound,
                                     self.records_to_entries)
        self.driver = RaftDriver(self.node_id, self.cluster_id, frozenset(voters),
                                 self.raft_log, self.data_dir, self.config, self.reactor,
                                 self.network, self._rng, self.persist_thread)
        self.network.bind(self.driver.receive)
        self.network.start()
        self.driver.start()
        self.driver.subscribe_transitions(lambda t: self._refresh_view())
        self.driver.subscribe_committed(lambda entries: self._refresh_view())
        self._start_gossip()
        return self.driver

    def _refresh_view(self) -> None:
        """Our own quorum state into the directory (it only moves forward)."""
        node = self.driver.node if self.driver is not None else None
        if node is None or self.directory is None:
            return
        state = node.quorum_state()
        self.directory.learn_view(QuorumView(self.cluster_id, node.leader_id, node.epoch,
                                             state.applied_offset,
                                             tuple(sorted(state.current_voters))))

    def _learned(self, node_ids: set[int]) -> None:
        """Nodes whose endpoint DiscoverBrokers just told us: connect to them there."""
        if self.network is None or self.directory is None:
            return
        for n in sorted(node_ids):
            e = self.directory.endpoint(n)
            if e is not None:
                self.network.set_peer(VoterAddress(n, e.host, e.port))

    async def stop(self, graceful: bool = True) -> None:
        """Stop the driver, then close every connection and the listener. ``graceful=False``
        is a crash as the peers see it: a leader does not resign first."""
        if self.gossip is not None and self._gossiping:
            self._gossiping = False
            await self.gossip.stop()
        if self.driver is not None:
            self.driver.stop(graceful=graceful)
        if self.port is not None:
            port, self.port = self.port, None
            await port.stopListening()
        self.factory.close_all()
        if self.network is not None:
            await self.network.stop()
