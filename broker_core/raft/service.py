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
from twisted.logger import Logger

from broker_core.raft import wire
from broker_core.raft.config import RaftConfig, VoterAddress
from broker_core.raft.driver import RaftDriver
from broker_core.raft.listener import InboundRequests, QuorumListenerFactory, QuorumRequestHandler
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
    ``await node.stop()``.
    """

    log = Logger(namespace="sluice.raft")

    def __init__(self, node_id: int, cluster_id: str, raft_log: IRaftLog,
                 data_dir: Path | str, config: RaftConfig, reactor: Any,
                 rng: random.Random | None = None, persist_thread: bool = False) -> None:
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
        handler = QuorumRequestHandler(self.inbound, reactor, config.request_timeout_ms / 1000,
                                       self.entries_to_records)
        self.factory = QuorumListenerFactory(handler, clock=reactor)
        self.port: Any = None
        self.network: QuorumNetwork | None = None
        self.driver: RaftDriver | None = None

    async def listen(self, host: str, port: int) -> int:
        """Bind the quorum listener; returns the bound port."""
        endpoint_type = TCP6ServerEndpoint if ":" in host else TCP4ServerEndpoint
        self.port = await endpoint_type(self.reactor, port, interface=host).listen(self.factory)
        return self.port.getHost().port

    def start(self, voters: dict[int, VoterAddress],
              peers: dict[int, VoterAddress] | None = None) -> RaftDriver:
        """Open the peer connections and start the driver (after :meth:`listen`).

        ``voters`` is the bootstrap voter set with addresses (a node not in it starts as an
        observer); ``peers`` are the addresses of other nodes that may become voters by a
        reassignment: the node needs them to fetch from, vote for or lead them."""
        if self.port is None:
            raise RuntimeError("listen() first")
        addresses = {**(peers or {}), **voters}
        self.network = QuorumNetwork(self.node_id, addresses, self.reactor,
                                     self.config.request_timeout_ms / 1000, self.inbound,
                                     self.records_to_entries)
        self.driver = RaftDriver(self.node_id, self.cluster_id, frozenset(voters),
                                 self.raft_log, self.data_dir, self.config, self.reactor,
                                 self.network, self._rng, self.persist_thread)
        self.network.bind(self.driver.receive)
        self.network.start()
        self.driver.start()
        return self.driver

    async def stop(self, graceful: bool = True) -> None:
        """Stop the driver, then close every connection and the listener. ``graceful=False``
        is a crash as the peers see it: a leader does not resign first."""
        if self.driver is not None:
            self.driver.stop(graceful=graceful)
        if self.port is not None:
            port, self.port = self.port, None
            await port.stopListening()
        self.factory.close_all()
        if self.network is not None:
            await self.network.stop()
