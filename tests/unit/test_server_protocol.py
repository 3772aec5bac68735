"""The broker's protocol shell, driven through StringTransport: responses leave in request
order even when handlers answer out of order; bad frames close only their connection."""

from __future__ import annotations

import struct

from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from broker_core.server.protocol import NO_RESPONSE, KafkaServerFactory
from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey


def make(handler, **kw):
    """Build ``(transport, protocol, factory)`` around ``handler``."""
    factory = KafkaServerFactory(handler, clock=task.Clock(), **kw)
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return transport, proto, factory


def request(api_key, version, correlation_id, body):
    return b"".join(framing.frame(apis.encode_request(api_key, version, correlation_id, "t",
                                                      body)))


def responses(transport, api_key, version):
    data = transport.value()
    out = []
    for frame in framing.FrameDecoder().feed(data):
        out.append(apis.decode_response(api_key, version, frame))
    return out


def test_responses_leave_in_request_order():
    pending = {}

    def handler(req, proto):
        d = defer.Deferred()
        pending[req.header.correlation_id] = d
        return d

    transport, proto, _ = make(handler)
    for cid in (1, 2, 3):
        proto.dataReceived(request(ApiKey.API_VERSIONS, 3, cid, {}))
    body = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    pending[3].callback(body)
    pending[2].callback(body)
    assert transport.value() == b""  # 1 is still outstanding: nothing may overtake it
    pending[1].callback(body)
    assert [cid for cid, _ in responses(transport, ApiKey.API_VERSIONS, 3)] == [1, 2, 3]


def test_no_response_slot_is_skipped():
    def handler(req, proto):
        if req.header.correlation_id == 1:
            return NO_RESPONSE
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    transport, proto, _ = make(handler)
    proto.dataReceived(request(ApiKey.API_VERSIONS, 3, 1, {}) +
                       request(ApiKey.API_VERSIONS, 3, 2, {}))
    assert [cid for cid, _ in responses(transport, ApiKey.API_VERSIONS, 3)] == [2]


def test_frames_split_across_reads_are_reassembled():
    seen = []
    transport, proto, _ = make(lambda req, p: seen.append(req.header.correlation_id) or
                               {"error_code": 0, "api_keys": [], "throttle_time_ms": 0})
    data = request(ApiKey.API_VERSIONS, 0, 5, {}) + request(ApiKey.API_VERSIONS, 0, 6, {})
    for i in range(len(data)):
        proto.dataReceived(data[i:i + 1])
    assert seen == [5, 6]


def test_oversized_frame_and_garbage_and_unknown_api_close_the_connection():
    for payload in (struct.pack(">i", 2048), struct.pack(">i", 4) + b"\x00\x01\x00\x00",
                    struct.pack(">ihhi", 10, 4242, 0, 9) + b"\xff\xff"):
        transport, proto, _ = make(lambda req, p: None, max_frame_bytes=1024)
        proto.dataReceived(payload)
        assert transport.disconnecting, payload


def test_unsupported_api_versions_version_answers_with_supported_ranges():
    transport, proto, _ = make(lambda req, p: None)
    proto.dataReceived(framing.frame([struct.pack(">hhih", 18, 77, 11, -1)])[0] +
                       struct.pack(">hhih", 18, 77, 11, -1))
    cid, body = responses(transport, ApiKey.API_VERSIONS, 0)[0]
    assert cid == 11 and body.error_code == 35
    # KIP-511: the answer lists the ApiVersions range so the client can retry with it.
    assert [(k.api_key, k.max_version) for k in body.api_keys] == [(18, 3)]
    assert not transport.disconnecting


def test_handler_exception_is_answered_or_closes_but_never_crashes():
    def handler(req, proto):
        raise RuntimeError("boom")

    transport, proto, _ = make(handler)
    proto.dataReceived(request(ApiKey.API_VERSIONS, 3, 1, {}))
    # ApiVersions has an error form: UNKNOWN_SERVER_ERROR goes back.
    assert responses(transport, ApiKey.API_VERSIONS, 3)[0][1].error_code == -1


def test_back_pressure_pauses_reading_when_too_many_requests_wait():
    waiting = []
    transport, proto, _ = make(lambda req, p: waiting.append(defer.Deferred()) or waiting[-1],
                               max_in_flight=2)
    proto.dataReceived(request(ApiKey.API_VERSIONS, 3, 1, {}) +
                       request(ApiKey.API_VERSIONS, 3, 2, {}))
    assert transport.producerState == "paused"
    waiting[0].callback({"error_code": 0, "api_keys": [], "throttle_time_ms": 0})
    assert transport.producerState == "producing"


def test_requests_whose_handler_raises_behind_a_parked_one_still_count_in_flight():
    # A parked request holds the line; the answers of the ones behind it (errors, since their
    # handler raised) wait in their slots and count against max_in_flight like any others.
    parked = defer.Deferred()

    def handler(req, proto):
        if req.header.correlation_id == 1:
            return parked
        raise RuntimeError("boom")

    transport, proto, _ = make(handler, max_in_flight=3)
    proto.dataReceived(request(ApiKey.API_VERSIONS, 3, 1, {}) +
                       request(ApiKey.API_VERSIONS, 3, 2, {}))
    assert transport.producerState == "producing"
    proto.dataReceived(request(ApiKey.API_VERSIONS, 3, 3, {}))
    assert transport.producerState == "paused"
    parked.callback({"error_code": 0, "api_keys": [], "throttle_time_ms": 0})
    assert transport.producerState == "producing"
    assert [cid for cid, _ in responses(transport, ApiKey.API_VERSIONS, 3)] == [1, 2, 3]
