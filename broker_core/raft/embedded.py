"""A broker's own metadata-quorum node (``metadata.store=quorum``): :class:`EmbeddedQuorum`.

It is a :class:`~broker_core.raft.service.QuorumNode` on a
:class:`~broker_core.raft.storage.DiskRaftLog` with a
:class:`~broker_core.raft.quorum_client.NetworkQuorumClient` on it; the broker builds its
:class:`~broker_core.raft.metadata_store.QuorumMetadataStore` on :attr:`client`. The node
starts through the start procedure (``QuorumNode.bootstrap``), as ``sluice-quorum``
does: from what it persisted, from the quorum it finds through ``quorum.bootstrap.servers``,
or from ``quorum.voters`` (a voter when the broker's id is listed, else an observer). A broker
given only bootstrap servers is an observer of the quorum it finds.

Start: open the log, register the client's APIs on the listener, bind the listener, run the
start procedure (which starts the node), then let the client follow the driver (the driver
gives it the latest snapshot, then the log after it). The client forwards writes to the
leader at the addresses the node knows, configured or learned by gossip. When the quorum
listener is SSL or SASL_SSL (``listener``), the listener serves TLS and every connection the
node and the client open (peers, gossip, forwarding) is TLS, the other node's certificate
checked against the listener's ``ssl.cafile`` and the host it is reached at. Stop, after the store
closed its session: stop the client (failing what waits), stop the node (a leader resigns
first, a start procedure still looking gives up), close the log with its clean-shutdown marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_core.config.listeners import ListenerConfig
from broker_core.config.quorum import RaftConfig, VoterAddress
from broker_core.raft.bootstrap import StartNode
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.service import QuorumNode
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.listener_endpoints import load_peer_tls, load_tls_options
from broker_core.wire.framing import MAX_FRAME_BYTES


class EmbeddedQuorum:
    """See the module docstring. ``start()`` then ``stop()``, each awaited."""

    def __init__(self, node_id: int, cluster_id: str, voters: dict[int, VoterAddress],
                 listen: tuple[str, int], data_dir: Path, reactor: Any,
                 config: RaftConfig | None = None,
                 bootstrap_servers: list[tuple[str, int]] | None = None,
                 discovery_timeout_ms: float | None = None,
                 limits: ServerLimits | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 credential: ClusterCredential | None = None,
                 listener: ListenerConfig | None = None) -> None:
        self.node_id = node_id
        #: The cluster credential: the quorum listener serves brokers only, and the node's and
        #: the client's connections log in with it (None: an open quorum, tests only).
        self.credential = credential
        #: The quorum listener's own connection and memory limits (the broker's keys).
        self.limits = limits
        #: The quorum listener's name, protocol and TLS files (``Listeners.quorum``; None: a
        #: PLAINTEXT listener named QUORUM). With TLS its files are read here, once: an
        #: unusable one is a TlsFileError naming its key before anything starts.
        self.listener = listener
        tls = None if listener is None else listener.tls
        self.server_tls = None if tls is None else load_tls_options(tls)
        self.peer_tls = None if tls is None else load_peer_tls(tls)
        self.max_frame_bytes = max_frame_bytes
        self.cluster_id = cluster_id
        self.voters = voters
        self.bootstrap_servers = list(bootstrap_servers or [])
        self.discovery_timeout_ms = discovery_timeout_ms
        self.started: StartNode | None = None  # how the start procedure started the node
        self.listen = listen
        self.data_dir = Path(data_dir)
        self.reactor = reactor
        self.config = config or RaftConfig()
        self.client = NetworkQuorumClient(
            node_id, voters, reactor, request_timeout_s=self.config.request_timeout_ms / 1000,
            credential=None if credential is None else credential.login, tls=self.peer_tls)
        self.node: QuorumNode | None = None
        self.raft_log: Any = None

    async def start(self) -> None:
        from broker_core.raft.storage import DiskRaftLog  # noqa: PLC0415 (the log layer)

        self.raft_log = DiskRaftLog.open(
            self.data_dir, time_ms=lambda: int(self.reactor.seconds() * 1000))
        self.node = QuorumNode(self.node_id, self.cluster_id, self.raft_log, self.data_dir,
                               self.config, self.reactor,
                               bootstrap_servers=self.bootstrap_servers,
                               limits=self.limits, max_frame_bytes=self.max_frame_bytes,
                               credential=self.credential,
                               listener_name=("QUORUM" if self.listener is None
                                              else self.listener.name),
                               server_tls=self.server_tls, peer_tls=self.peer_tls)
        self.client.serve_on(self.node.factory.handler)
        self.node.add_address_listener(self.client.learn_address)
        await self.node.listen(*self.listen)
        self.started = await self.node.bootstrap(self.voters,
                                                 discovery_timeout_ms=self.discovery_timeout_ms)
        assert self.node.driver is not None
        self.client.attach(self.node.driver)

    def begin_shutdown(self) -> None:
        """The broker is stopping: its last metadata writes wait briefly and not at all
        without a known leader (:meth:`NetworkQuorumClient.begin_shutdown`)."""
        self.client.begin_shutdown()

    async def stop(self, graceful: bool = True) -> None:
        self.client.stop()
        if self.node is not None:
            await self.node.stop(graceful=graceful)
        if self.raft_log is not None:
            self.raft_log.close()
            self.raft_log = None
