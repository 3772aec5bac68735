"""The coordinator channel over real sockets: after a registration answer the connection turns
around, the broker side sends requests and the client side answers them in order."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.endpoints import TCP4ServerEndpoint

from broker_core.rpc import connect_client
from broker_core.server.channel import ServerChannel
from broker_core.server.protocol import KafkaServerFactory
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode


async def _serve(handler):
    factory = KafkaServerFactory(handler, clock=reactor)
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
    return factory, port


@pytest_twisted.ensureDeferred
async def test_channel_turns_around_after_registration():
    channels: list[ServerChannel] = []

    def handler(request, proto):
        assert request.header.api_key == ApiKey.REGISTER_CONSUMER
        ch = ServerChannel()
        proto.attach_channel(ch)
        # Sent before the registration answer is written: it must still arrive after it.
        ch.request(ApiKey.PING, 0, {"consumer_id": "c1", "num_retries": 0})
        channels.append(ch)
        return {"error_code": 0}

    factory, port = await _serve(handler)
    client = await connect_client(reactor, "127.0.0.1", port.getHost().port, "test")
    try:
        resp = await client.request(ApiKey.REGISTER_CONSUMER, 0, {
            "group_id": "g", "consumer_id": "c1", "topic_count": "{}"})
        assert resp.error_code == 0
        seen = []
        gate: defer.Deferred = defer.Deferred()

        def answer(request):
            seen.append((request.header.api_key, request.body.consumer_id))
            if request.header.api_key == ApiKey.STOP_FETCHER:
                return gate  # answered later: the Ping after it must wait its turn
            return {"error_code": 0, "consumer_id": request.body.consumer_id,
                    "offsets": [{"topic": "t", "partition": 0, "offset": 7}]}

        client.serve(answer)
        ch = channels[0]
        # the Ping queued before the channel opened
        stop = ch.request(ApiKey.STOP_FETCHER, 0, {"consumer_id": "c1"})
        ping = ch.request(ApiKey.PING, 0, {"consumer_id": "c1", "num_retries": 1})
        while len(seen) < 3:
            await _tick()
        assert seen == [(ApiKey.PING, "c1"), (ApiKey.STOP_FETCHER, "c1"), (ApiKey.PING, "c1")]
        assert not ping.called
        gate.callback({"error_code": 0, "consumer_id": "c1", "offsets": None})
        stopped = await stop
        assert stopped.offsets is None
        pinged = await ping
        assert [(o.topic, o.partition, o.offset) for o in pinged.offsets] == [("t", 0, 7)]
        lost = []
        ch.on_lost(lambda: lost.append(True))
        client.transport.loseConnection()
        while not lost:
            await _tick()
        failed = ch.request(ApiKey.PING, 0, {"consumer_id": "c1", "num_retries": 0})
        try:
            await failed
        except Exception as e:  # noqa: BLE001 - the type is what we check
            assert "closed" in str(e)
        else:
            raise AssertionError("a request on a closed channel must fail")
    finally:
        client.transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_request_from_the_consumer_on_the_channel_closes_it():
    channels: list[ServerChannel] = []

    def handler(request, proto):
        ch = ServerChannel()
        proto.attach_channel(ch)
        channels.append(ch)
        return {"error_code": int(ErrorCode.NONE)}

    factory, port = await _serve(handler)
    client = await connect_client(reactor, "127.0.0.1", port.getHost().port, "test")
    try:
        await client.request(ApiKey.REGISTER_CONSUMER, 0, {
            "group_id": "g", "consumer_id": "c1", "topic_count": "{}"})
        lost = []
        channels[0].on_lost(lambda: lost.append(True))
        # A second request on what is now a channel: not a response, so the broker hangs up.
        d = client.request(ApiKey.CLUSTER_METADATA, 0, {})
        d.addErrback(lambda f: None)
        while not lost:
            await _tick()
        await client.closed_d
    finally:
        client.transport.loseConnection()
        await port.stopListening()


def _tick() -> defer.Deferred:
    d: defer.Deferred = defer.Deferred()
    reactor.callLater(0.01, d.callback, None)
    return d
