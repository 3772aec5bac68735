"""``QuorumNode.bootstrap`` on a real listener (127.0.0.1, port 0) and the real reactor: a
configured voter whose peers are known by id only, after finding nothing, answers
DiscoverBrokers naming itself a voter of ``quorum.voters`` (start procedure step 5.1), and a peer's
DiscoverBrokers *request* alone teaches it enough to begin the vote (step 6: gossip is
two-way)."""

from __future__ import annotations

import random

import pytest_twisted
from twisted.internet import reactor

from broker_core.raft import RaftConfig
from broker_core.raft.bootstrap import Phase
from broker_core.raft.discovery import Gossip, NodeEndpoint, QuorumView
from broker_core.raft.gossip import GossipClient
from broker_core.raft.service import QuorumNode
from broker_core.raft.storage import DiskRaftLog
from tests.support.cluster import eventually, free_port

CONFIG = RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300,
                    request_timeout_ms=500, retry_backoff_ms=10, fetch_max_wait_ms=200)


@pytest_twisted.ensureDeferred
async def test_a_waiting_voter_names_itself_and_starts_on_a_peers_request(tmp_path):
    raft_log = DiskRaftLog.open(tmp_path, time_ms=lambda: int(reactor.seconds() * 1000))
    # Its one bootstrap server is a port nobody listens on: nothing is ever found.
    node = QuorumNode(1, "c", raft_log, tmp_path, CONFIG, reactor, random.Random(1),
                      bootstrap_servers=[("127.0.0.1", free_port())])
    port = await node.listen("127.0.0.1", 0)
    phases: list[Phase] = []
    started = node.bootstrap({1: None, 2: None, 3: None}, discovery_timeout_ms=100,
                             on_phase=phases.append)
    peer = GossipClient(2, [("127.0.0.1", port)], reactor, 2.0, tell=lambda: Gossip(
        NodeEndpoint(2, "127.0.0.1", free_port(), 20), (), QuorumView("c")),
        receive=lambda g: None)
    try:
        await eventually(lambda: Phase.WAITING_FOR_VOTERS in phases, what="waiting for voters")
        assert not started.called
        answer = await peer.ask(("127.0.0.1", port), peer.tell())
        assert answer.node.node_id == 1 and answer.view.voter_ids == (1, 2, 3)
        assert answer.view.cluster_id == "c" and answer.view.leader_epoch == -1
        start = await started  # node 2's request made a majority (1 and 2) known
        assert start.as_voter and start.voter_ids == (1, 2, 3) and set(start.voters) == {1, 2}
        assert node.driver is not None and node.driver.running
        assert set(node.network.peers) == {2}  # node 3's address will come by gossip
    finally:
        await peer.stop()
        await node.stop(graceful=False)
        raft_log.close()
