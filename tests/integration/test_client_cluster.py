"""The client's cluster view against real brokers: metadata, leaders, one negotiated connection
per broker, reconnects, and a clear error when nothing is reachable."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from broker_core.wire.apis import ApiKey
from consumer_client.cluster import ClusterClient, NoBrokersAvailable
from tests.support.cluster import create_topic, eventually, free_port, leader_of, running_brokers


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2)


def _bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)


@pytest_twisted.ensureDeferred
async def test_metadata_leaders_and_requests_to_the_leader(brokers):
    await create_topic(brokers[0], "t", partitions=2, rf=2)
    # an unreachable bootstrap server first: the client moves on to the next one
    client = ClusterClient(f"127.0.0.1:{free_port()}," + _bootstrap(brokers), reactor=reactor)
    try:
        view = await eventually(lambda: _refreshed(client, "t"), what="leaders of t")
        assert set(view.brokers) == {1, 2}
        for p in (0, 1):
            leader = client.leader_for("t", p)
            assert leader == leader_of(brokers, "t", p).config.broker_id
            resp = await client.request(leader, ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "topics": [{"name": "t", "partitions": [
                    {"partition_index": p, "timestamp": -1}]}]})
            assert resp.topics[0].partitions[0].error_code == 0
        assert client.partitions_for("t") == [0, 1]
        assert client.leader_for("t", 9) == -1
        # one connection per broker, reused
        first = (await client.link(1)).proto
        assert (await client.link(1)).proto is first
        first.transport.loseConnection()
        await first.closed_d
        assert (await client.link(1)).proto is not first
    finally:
        client.close()


async def _refreshed(client, topic):
    view = await client.refresh([topic])
    parts = view.topics.get(topic, {})
    return view if parts and all(p.leader >= 0 for p in parts.values()) else None


@pytest_twisted.ensureDeferred
async def test_unknown_topic_is_reported_per_topic(brokers):
    client = ClusterClient(_bootstrap(brokers), reactor=reactor)
    try:
        view = await client.refresh(["no-such-topic"])
        assert view.topic_errors["no-such-topic"].name == "UNKNOWN_TOPIC_OR_PARTITION"
        assert client.partitions_for("no-such-topic") is None
    finally:
        client.close()


@pytest_twisted.ensureDeferred
async def test_nothing_reachable_names_every_server():
    ports = [free_port(), free_port()]
    client = ClusterClient(",".join(f"127.0.0.1:{p}" for p in ports), reactor=reactor,
                           connect_timeout_s=2)
    try:
        with pytest.raises(NoBrokersAvailable) as e:
            await client.refresh()
        for p in ports:
            assert f"127.0.0.1:{p}" in str(e.value)
    finally:
        client.close()


@pytest_twisted.ensureDeferred
async def test_concurrent_refreshes_share_one_metadata_request(brokers):
    from twisted.internet import defer

    await create_topic(brokers[0], "shared", partitions=2, rf=1)
    client = ClusterClient(_bootstrap(brokers), reactor=reactor)
    sent = []
    real = client.request_any

    async def counting(api_key, body):
        sent.append(body["topics"])
        return await real(api_key, body)

    client.request_any = counting
    try:
        views = await defer.gatherResults([
            defer.Deferred.fromCoroutine(client.refresh(["shared"])) for _ in range(50)])
        assert len(sent) == 1 and all(v.topics["shared"] for v in views)
        # a wider question is not answered by a narrower one in flight
        await defer.gatherResults([defer.Deferred.fromCoroutine(client.refresh(["shared"])),
                                   defer.Deferred.fromCoroutine(client.refresh(None))])
        assert len(sent) == 3
    finally:
        client.close()
