"""A broker's own metadata-quorum node (``metadata.store=quorum``): :class:`EmbeddedQuorum`.

It is a :class:`~broker_core.raft.service.QuorumNode` on a
:class:`~broker_core.raft.storage.DiskRaftLog` (a voter when the broker's id is in
``quorum.voters``, else an observer) with a
:class:`~broker_core.raft.quorum_client.NetworkQuorumClient` on it; the broker builds its
:class:`~broker_core.raft.metadata_store.QuorumMetadataStore` on :attr:`client`.

Start: open the log, register the client's APIs on the listener, bind the listener, start the
node, then let the client follow the driver (the driver replays the whole log to it: there are
no snapshots yet). Stop, after the store closed its session: stop the client (failing what
waits), stop the node (a leader resigns first), close the log with its clean-shutdown marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_core.raft.config import RaftConfig, VoterAddress
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.service import QuorumNode


class EmbeddedQuorum:
    """See the module docstring. ``start()`` then ``stop()``, each awaited."""

    def __init__(self, node_id: int, cluster_id: str, voters: dict[int, VoterAddress],
                 listen: tuple[str, int], data_dir: Path, reactor: Any,
                 config: RaftConfig | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.voters = voters
        self.listen = listen
        self.data_dir = Path(data_dir)
        self.reactor = reactor
        self.config = config or RaftConfig()
        self.client = NetworkQuorumClient(node_id, voters, reactor,
                                          request_timeout_s=self.config.request_timeout_ms / 1000)
        self.node: QuorumNode | None = None
        self.raft_log: Any = None

    async def start(self) -> None:
        from broker_core.raft.storage import DiskRaftLog  # noqa: PLC0415 (the log layer)

        self.raft_log = DiskRaftLog.open(
            self.data_dir, time_ms=lambda: int(self.reactor.seconds() * 1000))
        self.node = QuorumNode(self.node_id, self.cluster_id, self.raft_log, self.data_dir,
                               self.config, self.reactor)
        self.client.serve_on(self.node.factory.handler)
        await self.node.listen(*self.listen)
        self.client.attach(self.node.start(self.voters))

    async def stop(self, graceful: bool = True) -> None:
        self.client.stop()
        if self.node is not None:
            await self.node.stop(graceful=graceful)
        if self.raft_log is not None:
            self.raft_log.close()
            self.raft_log = None
