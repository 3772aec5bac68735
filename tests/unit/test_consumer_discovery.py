"""The consumer's coordinator discovery, shell side (consumer_client/consumer.py) on task.Clock
with a scripted cluster: ClusterMetadata v0 is tried only for the one next attempt to a broker
that closed the connection on v1, and an error code the client does not know is a failed attempt
that is retried, never a crash."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer, task
from twisted.internet.error import ConnectionClosed

from broker_core.wire.apis import ApiKey
from consumer_client.consumer import Consumer, ConsumerConfig, State


class ScriptedCluster:
    """Records (address, api, version, deferred); the test answers each."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.sent: list[tuple[tuple[str, int], int, int, defer.Deferred]] = []
        self.brokers: list = []

    async def request_address(self, address, api_key, body, *, version=None, timeout_s=None):
        d: defer.Deferred = defer.Deferred()
        self.sent.append((address, api_key, version, d))
        return await d

    def update_brokers(self, brokers):
        self.brokers = list(brokers)

    def disconnect_address(self, address):
        pass

    def close(self):
        pass


def discovering_consumer(servers):
    clock = task.Clock()
    cluster = ScriptedCluster(servers)
    c = Consumer(ConsumerConfig.create(bootstrap_servers="h:9", group_id="g", consumer_id="c",
                                       topics={"t": 1}),
                 reactor=clock, clock=clock, cluster=cluster)
    c.start()
    clock.advance(0)
    return clock, cluster, c


def next_request(clock, cluster, before):
    """Advance the clock until the consumer sends its next request; return it."""
    for _ in range(1000):
        if len(cluster.sent) > before:
            return cluster.sent[before]
        clock.advance(0.05)
    raise AssertionError("no next request")


def no_coordinator(code):
    return SimpleNamespace(error_code=code, brokers=[], coordinator_id=-1)


def test_v0_is_tried_once_after_a_closed_connection_then_v1_again():
    clock, cluster, c = discovering_consumer([("a", 1)])
    (address, api, version, d), = cluster.sent
    assert (address, api, version) == (("a", 1), ApiKey.CLUSTER_METADATA, 1)
    d.errback(ConnectionClosed())  # a broker stopping mid-request, or one without v1
    address, _, version, d = next_request(clock, cluster, 1)
    assert version == 0
    d.callback(no_coordinator(15))  # COORDINATOR_NOT_AVAILABLE: v0 on a sharded cluster
    _, _, version, d = next_request(clock, cluster, 2)
    assert version == 1  # not stuck on v0
    d.callback(SimpleNamespace(error_code=0, coordinator_id=3,
                               brokers=[SimpleNamespace(node_id=3, host="b", port=2)]))
    assert c.coordinator == (3, "b", 2)
    c.close()


def test_the_v0_fallback_is_for_the_address_that_closed_only():
    clock, cluster, c = discovering_consumer([("a", 1), ("b", 2)])
    (address, _, version, d), = cluster.sent
    assert address == ("a", 1)
    d.errback(ConnectionClosed())
    address, _, version, d = next_request(clock, cluster, 1)
    assert (address, version) == (("b", 2), 1)
    d.callback(no_coordinator(15))
    address, _, version, d = next_request(clock, cluster, 2)
    assert (address, version) == (("a", 1), 0)
    d.callback(no_coordinator(15))
    address, _, version, d = next_request(clock, cluster, 3)
    assert (address, version) == (("b", 2), 1)
    d.callback(no_coordinator(15))
    address, _, version, _ = next_request(clock, cluster, 4)
    assert (address, version) == (("a", 1), 1)
    c.close()


def test_an_unknown_error_code_is_a_failed_attempt_that_is_retried():
    clock, cluster, c = discovering_consumer([("a", 1)])
    (_, _, _, d), = cluster.sent
    d.callback(no_coordinator(31337))  # not a code this client knows
    assert c.state is State.DISCOVERING
    assert "31337" in (c.health.reason or "")
    _, api, version, _ = next_request(clock, cluster, 1)
    assert (api, version) == (ApiKey.CLUSTER_METADATA, 1)
    c.close()
