"""The quorum listener's admin APIs (DescribeQuorum 55, AlterPartitionReassignments 45),
through StringTransport: they reach the node from the admin source, a reassignment's answer
may come much later, a request naming another partition never reaches the node, and a node
that never answers gets REQUEST_TIMED_OUT written with the connection kept open."""

from __future__ import annotations

from broker_core.raft import wire
from broker_core.raft.listener_admin import ADMIN_SOURCE
from broker_core.raft.messages import (
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Envelope,
    ReplicaState,
)
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.raft_listener_harness import NODE, TIMEOUT_S, frame, make, sent_frames


def test_describe_quorum_reaches_the_node_from_the_admin_source_and_is_answered():
    transport, proto, inbound, delivered, _ = make()
    proto.dataReceived(frame(wire.encode_request(DescribeQuorumRequest(), 41)))
    (env,) = delivered
    assert (env.source, env.destination, env.message) == \
        (ADMIN_SOURCE, NODE, DescribeQuorumRequest())
    answer = DescribeQuorumResponse(ErrorCode.NONE, NODE, 4, 17,
                                    current_voters=(ReplicaState(NODE, 17, 100, 100),),
                                    target_voters=(ReplicaState(2),),
                                    observers=(ReplicaState(2, 9, 90, -1),))
    assert inbound.answer(Envelope(NODE, ADMIN_SOURCE, env.correlation_id, answer))
    (reply,) = sent_frames(transport)
    assert wire.decode_response(ApiKey.DESCRIBE_QUORUM, reply) == (41, answer)


def test_a_reassignment_is_answered_when_the_node_answers_long_after_the_request_timeout():
    transport, proto, inbound, delivered, clock = make()
    request = AlterVotersRequest((4, 5, 6), 30_000)
    proto.dataReceived(frame(wire.encode_request(request, 7)))
    (env,) = delivered
    assert env.source == ADMIN_SOURCE and env.message == request
    clock.advance(TIMEOUT_S * 5)  # the replication APIs' bound does not apply
    assert transport.value() == b"" and not transport.disconnecting
    answer = AlterVotersResponse(ErrorCode.NONE, NODE, 3)
    assert inbound.answer(Envelope(NODE, ADMIN_SOURCE, env.correlation_id, answer))
    (reply,) = sent_frames(transport)
    assert wire.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, reply) == (7, answer)


def test_a_node_that_never_answers_gets_request_timed_out_and_the_connection_stays():
    transport, proto, inbound, delivered, clock = make()
    proto.dataReceived(frame(wire.encode_request(AlterVotersRequest((2,), 1_000), 8)))
    proto.dataReceived(frame(wire.encode_request(DescribeQuorumRequest(), 9)))
    clock.advance(TIMEOUT_S + 1.0 + 0.001)  # the reassignment's own timeout plus the bound
    first, second = sent_frames(transport)
    assert wire.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, first)[1].error_code \
        is ErrorCode.REQUEST_TIMED_OUT
    assert wire.decode_response(ApiKey.DESCRIBE_QUORUM, second)[1].error_code \
        is ErrorCode.REQUEST_TIMED_OUT
    assert not transport.disconnecting and len(inbound) == 0
    # A late answer finds nobody waiting.
    late = Envelope(NODE, ADMIN_SOURCE, delivered[0].correlation_id,
                    AlterVotersResponse(ErrorCode.NONE, NODE, 1))
    assert not inbound.answer(late)


def test_another_partition_gets_invalid_request_without_reaching_the_node():
    transport, proto, _, delivered, _ = make()
    body = {"timeout_ms": 1000, "topics": [{"name": "other", "partitions": [
        {"partition_index": 0, "replicas": [1]}]}]}
    proto.dataReceived(frame(apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 5,
                                                 "t", body)))
    (reply,) = sent_frames(transport)
    cid, resp = wire.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, reply)
    assert cid == 5 and resp.error_code is ErrorCode.INVALID_REQUEST and delivered == []
    assert not transport.disconnecting
