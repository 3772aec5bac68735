"""Helpers of the consumer-client integration tests: a topic made ready on in-process
brokers (:func:`ready_topic`), messages written to it (:func:`fill`), and records taken from
a consumer (:func:`take`).
"""

from __future__ import annotations

from tests.support.cluster import (
    create_topic,
    eventually,
    leader_of,
    produce,
)


async def fill(brokers, topic, partition, n, start=0, batch=10):
    for i in range(start, start + n, batch):
        leader = leader_of(brokers, topic, partition)
        r = await produce(leader, topic, partition,
                          [f"{topic}-{partition}-{j}".encode() for j in range(i, min(i + batch,
                                                                                      start + n))])
        assert r.error_code == 0, r


async def ready_topic(brokers, name="t", partitions=2, rf=2):
    await create_topic(brokers[0], name, partitions=partitions, rf=rf)
    for p in range(partitions):
        await eventually(lambda p=p: leader_of(brokers, name, p), what=f"leader of {name}-{p}")


async def take(consumer, n, timeout=15.0):
    out = []

    async def more():
        out.extend(await consumer.get_many(n - len(out)))
        return len(out) >= n

    await eventually(more, timeout=timeout, interval=0, what=f"{n} messages")
    return out


def offsets_of(resp):
    return {(o.topic, o.partition): o.offset for o in resp.offsets}


