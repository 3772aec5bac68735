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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core.config.listeners import ListenerConfig
from broker_core.config.quorum import RaftConfig, VoterAddress
from broker_core.raft import wire
from broker_core.raft.bootstrap import BootstrapMachine, Phase, StartNode
from broker_core.raft.bootstrap_runner import BootstrapRunner, persisted_view
from broker_core.raft.discovery import Directory, Gossip, NodeEndpoint, QuorumView
from broker_core.raft.driver import RaftDriver
from broker_core.raft.gossip import GossipClient
from broker_core.raft.listener import InboundRequests, QuorumListenerFactory, QuorumRequestHandler
from broker_core.raft.listener_admin import GossipHandler
from broker_core.raft.log import IRaftLog
from broker_core.raft.transport import QuorumNetwork
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.security.peer_tls import PeerTls
from broker_core.security.principal import ListenerSettings, SecurityProtocol
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.listener_endpoints import bind
from broker_core.wire.framing import MAX_FRAME_BYTES


def records_codec() -> tuple[wire.EntriesToRecords | None, wire.RecordsToEntries | None]:
    """The mapping of log entries to RecordBatch bytes (:mod:`broker_core.raft.records`), or
    ``(None, None)`` where it is not available: fetch responses then carry no entries."""
    try:
        from broker_core.raft import records  # noqa: PLC0415 (optional part)
    except ImportError:
        return None, None
    return records.entries_to_records, records.records_to_entries


def _no_servers(server: tuple[str, int], gossip: Gossip) -> defer.Deferred:
    raise AssertionError("a machine without bootstrap servers asks nobody")


class QuorumNode:
    """A :class:`RaftDriver` with its listener and peer connections.

    Usage: ``port = await node.listen(host, port)``, then either
    ``await node.bootstrap(configured_voters)`` (the start procedure,
    :mod:`broker_core.raft.bootstrap_runner`: it starts the node once it has found or formed
    the quorum) or ``node.start(voters)`` (a fixed voter set with addresses), and
    ``await node.stop()``.

    :attr:`directory` is everything the node knows of the others (DiscoverBrokers): during
    :meth:`bootstrap` it is the machine's own, so the listener answers with the machine's view
    (a configured voter names itself a voter, start step 5.1). Gossip is two-way and always
    goes through :meth:`receive_gossip`: before the start into the machine, after it into the
    directory, connecting to every node whose endpoint is new (:meth:`QuorumNetwork.set_peer`)
    and telling the address listeners. With ``bootstrap_servers`` the node keeps asking them,
    and from its start every other node it knows, once a second for as long as it runs: every
    node it knows then learns its address from its own request, which voters that gossip with
    nobody (no bootstrap servers) need to reach it once it is made a voter.
    """

    log = Logger(namespace="sluice.raft")

    def __init__(self, node_id: int, cluster_id: str | None, raft_log: IRaftLog,
                 data_dir: Path | str, config: RaftConfig, reactor: Any,
                 rng: random.Random | None = None, persist_thread: bool = False,
                 bootstrap_servers: list[tuple[str, int]] | None = None,
                 limits: ServerLimits | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 credential: ClusterCredential | None = None,
                 listener_name: str = "QUORUM", server_tls: Any = None,
                 peer_tls: PeerTls | None = None) -> None:
        self.node_id = node_id
        #: With the cluster credential the listener serves the quorum to brokers only, and
        #: every connection this node opens (peers, gossip) logs in with it first. Without
        #: one (a standalone quorum for tests and benchmarks) the listener is open to all.
        self.credential = credential
        self._login = None if credential is None else credential.login
        #: TLS on the quorum port (the quorum listener is SSL or SASL_SSL): the listener's
        #: ``CertificateOptions`` and what every connection this node opens (peers, gossip)
        #: verifies the other node with. Both or neither: every node of a quorum speaks the
        #: same protocol on it.
        if (server_tls is None) != (peer_tls is None):
            raise ValueError("a TLS quorum listener needs both server_tls and peer_tls")
        self.server_tls = server_tls
        self.peer_tls = peer_tls
        #: What each accepted connection is told of its listener. SSL or PLAINTEXT only: the
        #: quorum port's one login is the cluster login, whatever SASL the protocol map names.
        self.listener = ListenerSettings(
            listener_name, SecurityProtocol.SSL if server_tls is not None
            else SecurityProtocol.PLAINTEXT)
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
                                            self.entries_to_records,
                                            brokers_only=credential is not None)
        self.factory = QuorumListenerFactory(
            self.handler, clock=reactor, limits=limits, max_frame_bytes=max_frame_bytes,
            sasl=None if credential is None else credential.sasl_settings(mechanisms=()),
            listener=self.listener)
        self.port: Any = None
        self.network: QuorumNetwork | None = None
        self.driver: RaftDriver | None = None
        self.bootstrap_servers = list(bootstrap_servers or [])
        self.directory: Directory | None = None  # what DiscoverBrokers tells (after listen)
        self.gossip: GossipClient | None = None
        self.runner: BootstrapRunner | None = None
        self.boot_time_ms = int(reactor.seconds() * 1000)
        self._address_listeners: list[Callable[[VoterAddress], None]] = []

    async def listen(self, host: str, port: int) -> int:
        """Bind the quorum listener (through TLS with ``server_tls``); returns the bound
        port."""
        lc = ListenerConfig(self.listener.name, self.listener.protocol, host, port)
        bound_listener = await bind(self.reactor, lc, self.factory, self.server_tls)
        self.port = bound_listener.port
        bound = self.port.getHost().port
        self.directory = Directory(NodeEndpoint(self.node_id, host, bound, self.boot_time_ms),
                                   QuorumView(self.cluster_id))
        self.handler.gossip = GossipHandler(self.receive_gossip, self._tell)
        if self.bootstrap_servers:
            self.gossip = GossipClient(self.node_id, self.bootstrap_servers, self.reactor,
                                       self.config.request_timeout_ms / 1000,
                                       tell=self._tell, receive=self.receive_gossip,
                                       credential=self._login, tls=self.peer_tls)
        return bound

    def bootstrap(self, configured_voters: Mapping[int, VoterAddress | None],
                  peers: Mapping[int, VoterAddress] | None = None,
                  discovery_timeout_ms: float | None = None,
                  on_phase: Callable[[Phase], None] | None = None) -> defer.Deferred:
        """The start procedure (after :meth:`listen`): read what this node persisted,
        discover the quorum through the bootstrap servers or form it from
        ``configured_voters`` (``quorum.voters``; ``None``: an id without an address), then
        start. ``peers`` are fixed addresses of other nodes (``--peers``). The Deferred fires
        with the :class:`StartNode` once the driver runs (:attr:`driver`), or fails with
        :class:`~broker_core.raft.bootstrap_runner.BootstrapFailed` saying why the node cannot
        start."""
        if self.directory is None:
            raise RuntimeError("listen() first")
        now = self.reactor.seconds() * 1000.0
        options = {} if discovery_timeout_ms is None else {
            "discovery_timeout_ms": discovery_timeout_ms}
        interval_ms = (self.gossip.interval_s if self.gossip is not None else 1.0) * 1000
        machine = BootstrapMachine(
            self.directory.me,
            {n: None if a is None else NodeEndpoint(n, a.host, a.port, 0)
             for n, a in configured_voters.items()},
            self.bootstrap_servers, self.cluster_id,
            persisted_view(self.data_dir, self.raft_log), now, interval_ms=interval_ms,
            **options)
        # One directory: what the listener and the gossip client tell is the machine's view.
        # Addresses that reached the node before (a DiscoverBrokers as it bound) and the fixed
        # peers are kept as old knowledge (boot time 0 for the configured ones).
        for e in self.directory.nodes.values():
            machine.directory.learn_node(e)
        for a in (peers or {}).values():
            machine.directory.learn_node(NodeEndpoint(a.node_id, a.host, a.port, 0))
        self.directory = machine.directory
        ask = self.gossip.ask if self.gossip is not None else _no_servers
        self.runner = BootstrapRunner(machine, self.reactor, ask, self._started, on_phase,
                                      self.node_id)
        return self.runner.run()

    def _started(self, start: StartNode) -> None:
        """The machine's StartNode: the driver starts with its voter set."""
        if self.cluster_id is None:
            self.cluster_id = start.cluster_id
        self._start_driver(start.voter_ids)

    def start(self, voters: dict[int, VoterAddress],
              peers: dict[int, VoterAddress] | None = None) -> RaftDriver:
        """Open the peer connections and start the driver (after :meth:`listen`) with a fixed
        configuration instead of :meth:`bootstrap`.

        ``voters`` is the bootstrap voter set with addresses (a node not in it starts as an
        observer); ``peers`` are the addresses of other nodes that may become voters by a
        reassignment: the node needs them to fetch from, vote for or lead them."""
        if self.port is None or self.directory is None:
            raise RuntimeError("listen() first")
        if self.cluster_id is None:
            raise RuntimeError("no cluster id: give one, or bootstrap() to discover it")
        # What the configuration says is the oldest knowledge (boot time 0): anything a node
        # reports of itself through DiscoverBrokers replaces it.
        self.directory.learn_view(QuorumView(self.cluster_id, voter_ids=tuple(sorted(voters))))
        if not self.directory.view.voter_ids:
            self.directory.view = QuorumView(self.cluster_id, voter_ids=tuple(sorted(voters)))
        for a in {**(peers or {}), **voters}.values():
            self.directory.learn_node(NodeEndpoint(a.node_id, a.host, a.port, 0))
        return self._start_driver(tuple(sorted(voters)))

    def _start_driver(self, voter_ids: tuple[int, ...]) -> RaftDriver:
        assert self.directory is not None and self.cluster_id is not None
        # Every node the directory knows, configured or discovered before the start.
        addresses = {n: VoterAddress(n, e.host, e.port) for n, e in self.directory.nodes.items()}
        self.network = QuorumNetwork(self.node_id, addresses, self.reactor,
                                     self.config.request_timeout_ms / 1000, self.inbound,
                                     self.records_to_entries, self._login, self.peer_tls)
        self.driver = RaftDriver(self.node_id, self.cluster_id, frozenset(voter_ids),
                                 self.raft_log, self.data_dir, self.config, self.reactor,
                                 self.network, self._rng, self.persist_thread)
        self.network.bind(self.driver.receive)
        self.network.start()
        self.driver.start()
        self.driver.subscribe_transitions(lambda t: self._refresh_view())
        self.driver.subscribe_committed(lambda entries: self._refresh_view())
        for a in addresses.values():
            self._reach(a)
        if self.gossip is not None:
            self.gossip.start()
        return self.driver

    def add_address_listener(self, callback: Callable[[VoterAddress], None]) -> None:
        """``callback`` hears of every other node's address the node starts with or learns
        later through DiscoverBrokers (a node's newest address replaces its older ones)."""
        self._address_listeners.append(callback)

    def _tell_address(self, address: VoterAddress) -> None:
        for callback in self._address_listeners:
            callback(address)

    def _tell(self) -> Gossip:
        assert self.directory is not None
        return self.directory.gossip()

    def receive_gossip(self, gossip: Gossip) -> None:
        """What a peer told in DiscoverBrokers (its request or its answer). Raises
        :class:`ClusterMismatch` for a peer of another cluster, which teaches nothing."""
        assert self.directory is not None
        self.directory.check_cluster(gossip.view)
        if self.runner is not None and not self.runner.finished:
            self.runner.gossip_received(gossip)  # the machine merges it into the directory
            return
        self._learned(self.directory.merge(gossip))

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
        """Nodes whose endpoint DiscoverBrokers just told us: connect to them there, and
        (gossiping) ask them too from now on."""
        if self.network is None or self.directory is None:
            return  # before the start: the network is built from the directory
        for n in sorted(node_ids):
            e = self.directory.endpoint(n)
            if e is not None:
                address = VoterAddress(n, e.host, e.port)
                self.network.set_peer(address)
                self._reach(address)

    def _reach(self, address: VoterAddress) -> None:
        """A node's address, at the start or learned: tell the address listeners and
        (gossiping) ask that node too from now on."""
        self._tell_address(address)
        if self.gossip is not None and address.node_id != self.node_id:
            self.gossip.add_server((address.host, address.port))

    async def stop(self, graceful: bool = True) -> None:
        """Stop the driver, then close every connection and the listener. ``graceful=False``
        is a crash as the peers see it: a leader does not resign first."""
        if self.runner is not None:
            self.runner.stop()
        if self.gossip is not None:
            await self.gossip.stop()
        if self.driver is not None:
            self.driver.stop(graceful=graceful)
        if self.port is not None:
            port, self.port = self.port, None
            await port.stopListening()
        self.factory.close_all()
        if self.network is not None:
            await self.network.stop()
