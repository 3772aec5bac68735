"""The quorum's connections on real sockets: a response comes back to the node under the
node's own correlation id; a peer that never answers costs one dropped request and a fresh
connection, not a stuck one."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor, task
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol

from broker_core.config.quorum import VoterAddress
from broker_core.raft.listener import InboundRequests, QuorumListenerFactory, QuorumRequestHandler
from broker_core.raft.messages import Envelope, VoteRequest, VoteResponse
from broker_core.raft.transport import QuorumNetwork
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import eventually


class _Silent(Protocol):
    """Accepts requests and never answers."""

    def connectionMade(self) -> None:  # noqa: N802
        self.factory.opened += 1

    def connectionLost(self, reason=None) -> None:  # noqa: N802
        self.factory.closed += 1


class _SilentFactory(Factory):
    protocol = _Silent

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0


async def _network(peer_port: int, timeout_s: float, delivered: list):
    network = QuorumNetwork(1, {1: VoterAddress(1, "127.0.0.1", 1),
                                2: VoterAddress(2, "127.0.0.1", peer_port)},
                            reactor, timeout_s, InboundRequests(1))
    network.bind(delivered.append)
    network.start()
    return network


@pytest_twisted.ensureDeferred
async def test_a_response_returns_under_the_nodes_correlation_id():
    answer = VoteResponse(ErrorCode.NONE, -1, 7, True)
    peer_inbound = InboundRequests(2)
    seen: list[Envelope] = []

    def peer_node(env: Envelope) -> None:  # the peer's node answers at once
        seen.append(env)
        peer_inbound.answer(Envelope(2, env.source, env.correlation_id, answer))

    peer_inbound.deliver = peer_node
    factory = QuorumListenerFactory(QuorumRequestHandler(peer_inbound, reactor, 5.0),
                                    clock=reactor)
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
    delivered: list[Envelope] = []
    network = await _network(port.getHost().port, 5.0, delivered)
    try:
        request = VoteRequest("c", 7, 1, 0, 0)
        network.send(Envelope(1, 2, 4242, request))
        network.send(Envelope(1, 2, 4243, request))
        await eventually(lambda: len(delivered) == 2, timeout=10, what="two responses")
        assert delivered == [Envelope(2, 1, 4242, answer), Envelope(2, 1, 4243, answer)]
        assert [(e.source, e.destination, e.message) for e in seen] == [(1, 2, request)] * 2
    finally:
        await network.stop()
        factory.close_all()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_an_unanswered_request_is_dropped_and_its_connection_replaced():
    silent = _SilentFactory()
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(silent)
    delivered: list[Envelope] = []
    network = await _network(port.getHost().port, 0.3, delivered)
    peer = network.peers[2]
    try:
        network.send(Envelope(1, 2, 1, VoteRequest("c", 7, 1, 0, 0)))
        await eventually(lambda: peer.dropped == 1, timeout=5, what="the request dropped")
        await eventually(lambda: silent.closed >= 1 and silent.opened >= 2, timeout=5,
                         what="the connection closed and reopened")
        assert delivered == []
        # A request to a node with no address is dropped without a connection attempt.
        network.send(Envelope(1, 9, 2, VoteRequest("c", 7, 1, 0, 0)))
        await task.deferLater(reactor, 0.05, lambda: None)
        assert delivered == []
    finally:
        await network.stop()
        await port.stopListening()
