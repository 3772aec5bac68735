"""The quorum listener, driven through StringTransport: what it advertises, how requests become
envelopes for the node and the node's answers go back in request order with the wire's
correlation ids, and how bad input is refused without reaching the node."""

from __future__ import annotations

from twisted.internet import task
from twisted.internet.testing import StringTransport

from broker_core.raft import wire
from broker_core.raft.listener import (
    SERVED_VERSIONS,
    InboundRequests,
    QuorumListenerFactory,
    QuorumRequestHandler,
)
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.security.principal import Principal
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.raft_listener_harness import NODE, TIMEOUT_S, frame, make, sent_frames


def test_api_versions_advertises_exactly_the_quorum_apis():
    transport, proto, *_ = make()
    proto.dataReceived(frame(apis.encode_request(ApiKey.API_VERSIONS, 3, 9, "t", {})))
    (reply,) = sent_frames(transport)
    cid, body = apis.decode_response(ApiKey.API_VERSIONS, 3, reply)
    assert cid == 9 and body.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert advertised == {int(k): v for k, v in SERVED_VERSIONS.items()}
    # 59: FetchSnapshot; 17 and 36: SaslHandshake and SaslAuthenticate (the cluster login).
    assert set(advertised) == {18, 1, 52, 53, 54, 55, 59, 45, 17, 36}
    assert advertised[1] == (12, 12)


def test_requests_reach_the_node_and_answers_leave_in_request_order():
    transport, proto, inbound, delivered, _ = make()
    vote = VoteRequest("c", 3, 2, 1, 10)
    begin = BeginQuorumEpochRequest("c", 3, 3)
    proto.dataReceived(frame(wire.encode_request(vote, 700)))
    proto.dataReceived(frame(wire.encode_request(begin, 701)))
    assert [(e.source, e.destination, e.message) for e in delivered] == \
        [(2, NODE, vote), (3, NODE, begin)]
    assert len({e.correlation_id for e in delivered}) == 2
    # The node answers the second first: nothing may overtake the first.
    begin_answer = BeginQuorumEpochResponse(ErrorCode.NONE, 3, 3)
    assert inbound.answer(Envelope(NODE, 3, delivered[1].correlation_id, begin_answer))
    assert transport.value() == b""
    vote_answer = VoteResponse(ErrorCode.NONE, -1, 3, True)
    assert inbound.answer(Envelope(NODE, 2, delivered[0].correlation_id, vote_answer))
    first, second = sent_frames(transport)
    assert wire.decode_response(ApiKey.VOTE, first) == (700, vote_answer)
    assert wire.decode_response(ApiKey.BEGIN_QUORUM_EPOCH, second) == (701, begin_answer)
    assert len(inbound) == 0
    # An answer nobody waits for any more is dropped.
    assert not inbound.answer(Envelope(NODE, 2, delivered[0].correlation_id, vote_answer))


def test_a_long_polled_fetch_is_answered_when_the_node_answers():
    transport, proto, inbound, delivered, clock = make()
    fetch = FetchRequest("c", 3, 4, 10, 4, 500)
    proto.dataReceived(frame(wire.encode_request(fetch, 42)))
    (env,) = delivered
    assert env.message == fetch and env.source == 3
    clock.advance(TIMEOUT_S / 2)
    assert transport.value() == b""
    answer = FetchResponse(ErrorCode.NONE, NODE, 4, 10)
    inbound.answer(Envelope(NODE, 3, env.correlation_id, answer))
    (reply,) = sent_frames(transport)
    assert wire.decode_response(ApiKey.FETCH, reply) == (42, answer)


def test_an_unanswered_request_closes_its_connection_after_the_timeout():
    transport, proto, inbound, delivered, clock = make()
    proto.dataReceived(frame(wire.encode_request(FetchRequest("c", 3, 4, 10, 4, 500), 1)))
    clock.advance(TIMEOUT_S + 0.1)
    assert transport.disconnecting
    assert len(inbound) == 0
    assert not inbound.answer(Envelope(NODE, 3, delivered[0].correlation_id,
                                       FetchResponse(ErrorCode.NONE, NODE, 4, 10)))


def test_fetch_at_another_version_gets_unsupported_version_and_no_node_call():
    transport, proto, _, delivered, _ = make()
    body = wire.request_body(FetchRequest("c", 3, 4, 10, 4, 500))
    del body["cluster_id"]  # v11 has neither the cluster id nor the last fetched epoch
    del body["topics"][0]["partitions"][0]["last_fetched_epoch"]
    proto.dataReceived(frame(apis.encode_request(ApiKey.FETCH, 11, 5, "t", body)))
    (reply,) = sent_frames(transport)
    cid, decoded = apis.decode_response(ApiKey.FETCH, 11, reply)
    assert cid == 5
    assert {p.error_code for t in decoded.responses for p in t.partitions} == \
        {ErrorCode.UNSUPPORTED_VERSION}
    assert delivered == []


def test_another_partition_or_a_forged_source_gets_invalid_request():
    transport, proto, _, delivered, _ = make()
    body = wire.request_body(FetchRequest("c", 3, 4, 10, 4, 500))
    body["topics"][0]["topic"] = "orders"
    proto.dataReceived(frame(apis.encode_request(ApiKey.FETCH, 12, 6, "t", body)))
    # A vote "from" the listening node itself.
    proto.dataReceived(frame(wire.encode_request(VoteRequest("c", 3, NODE, 1, 10), 7)))
    fetch_reply, vote_reply = sent_frames(transport)
    cid, decoded = apis.decode_response(ApiKey.FETCH, 12, fetch_reply)
    assert (cid, decoded.error_code) == (6, ErrorCode.INVALID_REQUEST)
    cid, decoded = wire.decode_response(ApiKey.VOTE, vote_reply)
    assert (cid, decoded.error_code) == (7, ErrorCode.INVALID_REQUEST)
    assert delivered == []
    assert not transport.disconnecting


def test_malformed_frames_and_other_apis_close_the_connection():
    transport, proto, _, delivered, _ = make()
    proto.dataReceived(b"\x00\x00\x00\x03abc")
    assert transport.disconnecting and delivered == []

    transport, proto, _, delivered, _ = make()
    produce = apis.encode_request(ApiKey.PRODUCE, 8, 1, "t",
                                  {"acks": 1, "timeout_ms": 10, "topic_data": []})
    proto.dataReceived(frame(produce))
    assert transport.disconnecting and delivered == []
    assert transport.value() == b""

    transport, proto, _, delivered, _ = make()
    proto.dataReceived(b"\xff\xff\xff\xff")  # a negative frame size
    assert transport.disconnecting and delivered == []


def test_a_brokers_only_listener_refuses_every_acting_api_to_anyone_else():
    transport, proto, inbound, delivered, _ = make(ClusterCredential("q" * 40))
    for i, message in enumerate([VoteRequest("c", 5, 2, 4, 100),
                                 BeginQuorumEpochRequest("c", 2, 5),
                                 FetchRequest("c", 2, 4, 1 << 40, 4, 0)]):
        key = wire.api_key_of(message)
        proto.dataReceived(frame(apis.encode_request(key, wire.VERSIONS[key], 10 + i, "t",
                                                     wire.request_body(message))))
        (reply,) = sent_frames(transport)
        transport.clear()
        _, body = apis.decode_response(key, wire.VERSIONS[key], reply)
        assert body.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert delivered == [] and len(inbound) == 0  # nothing reached the node
    assert not transport.disconnecting
    # ApiVersions and DescribeQuorum stay open; a broker connection reaches the node.
    proto.dataReceived(frame(apis.encode_request(ApiKey.API_VERSIONS, 3, 20, "t", {})))
    (reply,) = sent_frames(transport)
    assert apis.decode_response(ApiKey.API_VERSIONS, 3, reply)[1].error_code == 0
    proto.security.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    proto.dataReceived(frame(apis.encode_request(
        ApiKey.VOTE, 0, 21, "t", wire.request_body(VoteRequest("c", 5, 2, 4, 100)))))
    assert [type(e.message) for e in delivered] == [VoteRequest]


# -- the other protocol than the listener's --------------------------------------------------


def test_a_tls_handshake_on_the_plaintext_quorum_listener_is_refused_and_explained():
    """A quorum node whose quorum listener is SSL reaching a node where it is PLAINTEXT: its
    ClientHello is refused (as a Kafka frame it would be over 350 MB) with advice naming the
    setting every node must agree on; nothing reaches the node."""
    from twisted.logger import capturedLogs

    transport, proto, inbound, delivered, _ = make()
    client_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32)
    with capturedLogs() as events:
        proto.dataReceived(client_hello)
    assert transport.disconnecting and transport.value() == b"" and delivered == []
    lines = [e["log_format"].format(**e) for e in events]
    assert any("a TLS handshake on the plaintext listener PLAINTEXT" in line
               and "quorum.listener.name" in line for line in lines), lines


def test_a_failed_handshake_on_the_tls_quorum_listener_is_explained():
    """On an SSL quorum listener a handshake that fails before it completes is logged with
    OpenSSL's reason, and with the same advice when the peer sent no TLS (a plaintext node); a
    connection lost otherwise is not logged."""
    from OpenSSL import SSL
    from twisted.logger import capturedLogs
    from twisted.python.failure import Failure

    from broker_core.security.principal import ListenerSettings, SecurityProtocol

    clock = task.Clock()
    factory = QuorumListenerFactory(
        QuorumRequestHandler(InboundRequests(NODE), clock, TIMEOUT_S), clock=clock,
        listener=ListenerSettings("QUORUM", SecurityProtocol.SSL))
    plaintext = Failure(SSL.Error([("SSL routines", "", "wrong version number")]))
    untrusted = Failure(SSL.Error([("SSL routines", "", "certificate verify failed")]))
    with capturedLogs() as events:
        for reason in (plaintext, untrusted, Failure(ConnectionError("gone"))):
            proto = factory.buildProtocol(None)
            proto.makeConnection(StringTransport())
            proto.connectionLost(reason)
    lines = [e["log_format"].format(**e) for e in events if "handshake" in e["log_format"]]
    assert len(lines) == 2, lines
    assert ("on listener QUORUM failed: wrong version number (a plaintext peer?" in lines[0]
            and "quorum.listener.name" in lines[0])
    assert lines[1].endswith("on listener QUORUM failed: certificate verify failed")
