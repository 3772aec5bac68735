"""Sluice's producer with ``enable.idempotence`` against a real in-process broker, whose
clients reach it through a :class:`~tests.support.cutting_proxy.CuttingProxy` (its advertised
listener): a Produce reaches the broker and is written, its answer is lost, the producer
resends the batch, and the broker recognises it: the record is stored once, at the offset the
acknowledgement names. The same loss without idempotence stores the record twice (so the test
can see a duplicate when there is one)."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.wire.apis import ApiKey
from consumer_client.producer import Producer
from tests.support.cluster import free_port, start_brokers, stop_brokers
from tests.support.cutting_proxy import CuttingProxy
from tests.support.producer_harness import fetch_all, topic_ready


@pytest.fixture
def proxied(zk_hosts, tmp_path):
    """``(broker, proxy, bootstrap)``: one broker advertised at the proxy's port."""
    port = free_port()
    proxy = CuttingProxy(reactor, ("127.0.0.1", port), ApiKey.PRODUCE)
    proxy_port = pytest_twisted.blockon(defer.Deferred.fromCoroutine(proxy.start()))
    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(start_brokers(
        zk_hosts, tmp_path, 1, listeners=f"tcp:{port}:interface=127.0.0.1",
        advertised_listeners=f"127.0.0.1:{proxy_port}")))
    try:
        yield brokers, proxy, f"127.0.0.1:{proxy_port}"
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(proxy.stop()))


@pytest.mark.parametrize("idempotent", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_lost_answer_is_resent_and_stored_once_only_when_idempotent(proxied,
                                                                            idempotent):
    brokers, proxy, bootstrap = proxied
    await topic_ready(brokers, "t")
    producer = Producer(bootstrap_servers=bootstrap, linger_ms=0, retry_backoff_ms=50,
                        enable_idempotence=idempotent)
    try:
        await producer.send("t", b"first")
        proxy.cut_next(forward=True)
        seen = proxy.seen
        cut = await producer.send("t", b"lost answer")
        assert proxy.cuts == 1 and proxy.seen >= seen + 2  # written, then resent
        after = await producer.send("t", b"after")
    finally:
        await producer.close()
    stored = [(r.offset, r.value) for r in await fetch_all(brokers, "t", 0)]
    if idempotent:
        assert stored == [(0, b"first"), (1, b"lost answer"), (2, b"after")]
        assert (cut.offset, after.offset) == (1, 2)
    else:
        assert stored == [(0, b"first"), (1, b"lost answer"), (2, b"lost answer"),
                          (3, b"after")]
