"""DiscoverBrokers' directory (the gossip): monotonic updates (a node's endpoint by
boot time, the quorum view by (epoch, voters offset)), another cluster refused, the wire body
round trip, and the quorum listener answering it."""

from __future__ import annotations

import pytest

from broker_core.config.quorum import RaftConfigError, parse_bootstrap_servers
from broker_core.raft.discovery import (
    ClusterMismatch,
    Directory,
    Gossip,
    NodeEndpoint,
    QuorumView,
    gossip_body,
    gossip_from_body,
)
from broker_core.raft.listener_admin import GossipHandler
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.raft_listener_harness import frame, make, sent_frames

ME = NodeEndpoint(1, "h1", 9001, 100)


def test_a_node_endpoint_moves_only_to_a_later_boot():
    d = Directory(ME)
    assert d.learn_node(NodeEndpoint(2, "old", 1, 50))
    assert not d.learn_node(NodeEndpoint(2, "older", 1, 40))
    assert not d.learn_node(NodeEndpoint(2, "same-boot", 1, 50))
    assert d.learn_node(NodeEndpoint(2, "new", 2, 60))
    assert d.endpoint(2) == NodeEndpoint(2, "new", 2, 60)
    # What others say of us, or of a tool (-1), is never kept.
    assert not d.learn_node(NodeEndpoint(1, "elsewhere", 1, 999))
    assert not d.learn_node(NodeEndpoint(-1, "tool", 1, 999))
    assert d.endpoint(1) == ME and set(d.nodes) == {2}


def test_the_view_moves_only_to_a_higher_epoch_then_voters_offset():
    d = Directory(ME, QuorumView("c", 1, 3, 10, (1, 2, 3)))
    assert not d.learn_view(QuorumView("c", 2, 2, 50, (2, 3, 4)))  # older epoch
    assert not d.learn_view(QuorumView("c", 1, 3, 10, (9,)))  # same order
    assert d.learn_view(QuorumView("c", 1, 3, 12, (3, 2, 1, 4)))  # a reassignment step
    assert d.view == QuorumView("c", 1, 3, 12, (1, 2, 3, 4))
    assert d.learn_view(QuorumView("c", 4, 4, 12, (1, 2, 3, 4)))
    assert d.view.leader_id == 4


def test_another_cluster_is_refused_and_an_unknown_id_is_learned_once():
    d = Directory(ME)
    assert d.view.cluster_id is None
    assert d.learn_view(QuorumView("c", -1, -1, -1, ()))  # only the id: still news
    assert d.view.cluster_id == "c"
    with pytest.raises(ClusterMismatch, match="cluster 'other'"):
        d.merge(Gossip(NodeEndpoint(5, "x", 1, 1), (), QuorumView("other", 5, 9, 9, (5,))))
    assert d.nodes == {} and d.view.leader_epoch == -1
    # A view without an id (a fresh node's) does not erase ours.
    d.learn_view(QuorumView(None, 2, 1, 0, (2,)))
    assert d.view == QuorumView("c", 2, 1, 0, (2,))


def test_merge_learns_the_sender_and_the_nodes_it_knows_and_reports_missing_voters():
    d = Directory(ME)
    g = Gossip(NodeEndpoint(2, "h2", 2, 5), (NodeEndpoint(3, "h3", 3, 6), ME),
               QuorumView("c", 2, 4, 7, (1, 2, 3, 4)))
    assert d.merge(g) == {2, 3}
    assert d.missing_voters() == {4}
    assert d.merge(g) == set()  # nothing new the second time
    assert d.gossip().brokers == (NodeEndpoint(2, "h2", 2, 5), NodeEndpoint(3, "h3", 3, 6))


def test_gossip_round_trips_through_the_codec():
    g = Gossip(ME, (NodeEndpoint(2, "::1", 9, 7),), QuorumView(None, -1, -1, -1, ()))
    req = apis.decode_request(b"".join(apis.encode_request(
        ApiKey.DISCOVER_BROKERS, 0, 1, "t", gossip_body(g))), defined=True)
    assert gossip_from_body(req.body) == g
    g2 = Gossip(ME, (), QuorumView("c", 1, 2, 3, (1, 2)))
    _, resp = apis.decode_response(ApiKey.DISCOVER_BROKERS, 0, b"".join(apis.encode_response(
        ApiKey.DISCOVER_BROKERS, 0, 1, gossip_body(g2, response=True))))
    assert resp.error_code == 0 and gossip_from_body(resp) == g2


def test_the_listener_answers_discover_brokers_without_advertising_it():
    transport, proto, handler_inbound, delivered, _ = make()
    factory_handler = proto.factory.handler
    directory = Directory(NodeEndpoint(1, "h1", 1, 10), QuorumView("c", 1, 2, 0, (1,)))
    learned: list[set[int]] = []

    def receive(g: Gossip) -> None:
        learned.append(directory.merge(g))

    factory_handler.gossip = GossipHandler(receive, directory.gossip)
    asker = Gossip(NodeEndpoint(7, "h7", 7, 70), (), QuorumView(None))
    proto.dataReceived(frame(apis.encode_request(ApiKey.DISCOVER_BROKERS, 0, 3, "t",
                                                 gossip_body(asker))))
    other = Gossip(NodeEndpoint(8, "h8", 8, 80), (), QuorumView("other", 9, 9, 9, (8,)))
    proto.dataReceived(frame(apis.encode_request(ApiKey.DISCOVER_BROKERS, 0, 4, "t",
                                                 gossip_body(other))))
    first, second = sent_frames(transport)
    cid, body = apis.decode_response(ApiKey.DISCOVER_BROKERS, 0, first)
    assert cid == 3 and gossip_from_body(body) == Gossip(
        directory.me, (NodeEndpoint(7, "h7", 7, 70),), QuorumView("c", 1, 2, 0, (1,)))
    assert learned == [{7}] and delivered == []
    cid, body = apis.decode_response(ApiKey.DISCOVER_BROKERS, 0, second)
    assert cid == 4 and body.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert 8 not in directory.nodes


def test_a_listener_without_a_directory_closes_the_connection():
    transport, proto, *_ = make()
    g = Gossip(NodeEndpoint(7, "h7", 7, 70), (), QuorumView(None))
    proto.dataReceived(frame(apis.encode_request(ApiKey.DISCOVER_BROKERS, 0, 3, "t",
                                                 gossip_body(g))))
    assert transport.disconnecting and sent_frames(transport) == []


def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    for raw in ("", "a", "a:0", "a:1,,b:2"):
        with pytest.raises(RaftConfigError, match="--bootstrap-servers"):
            parse_bootstrap_servers(raw, "--bootstrap-servers")


def test_the_network_connects_to_learned_nodes_and_not_once_stopped():
    from twisted.internet import reactor  # nothing is started: no connection is made

    from broker_core.config.quorum import VoterAddress
    from broker_core.raft.listener import InboundRequests
    from broker_core.raft.transport import QuorumNetwork

    net = QuorumNetwork(1, {2: VoterAddress(2, "h2", 2)}, reactor, 1.0, InboundRequests(1))
    first = net.peers[2]
    net.set_peer(VoterAddress(2, "h2", 2))  # the same address: the same connection
    assert net.peers[2] is first
    net.set_peer(VoterAddress(2, "moved", 22))  # a later boot elsewhere
    assert net.peers[2].peer == VoterAddress(2, "moved", 22)
    net.set_peer(VoterAddress(3, "h3", 3))
    net.set_peer(VoterAddress(1, "me", 1))  # never to itself
    assert set(net.peers) == {2, 3}
    net.stop()
    net.set_peer(VoterAddress(4, "h4", 4))
    assert set(net.peers) == {2, 3}
