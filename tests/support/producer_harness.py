"""A topic made ready on in-process brokers and every record read back from one of its
partitions (the producer's integration tests).
"""

from __future__ import annotations

from broker_core.wire.apis import ApiKey
from broker_core.wire.records import decode_records
from tests.support.cluster import (
    call,
    controller_of,
    create_topic,
    eventually,
    leader_of,
)


async def topic_ready(brokers, name, partitions=1, rf=1, configs=()):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], name, partitions=partitions, rf=rf, configs=configs)
    for p in range(partitions):
        await eventually(lambda p=p: leader_of(brokers, name, p), what=f"leader of {name}-{p}")


async def fetch_all(brokers, topic, partition):
    """Every record of a partition, read from its leader with Fetch."""
    leader = await eventually(lambda: leader_of(brokers, topic, partition), what="leader")
    out, offset = [], 0
    while True:
        resp = await call(leader, ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset,
                 "partition_max_bytes": 1 << 24}]}]})
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0, part
        records = decode_records(part.records) if part.records else []
        if not records:
            return out
        out += records
        offset = records[-1].offset + 1


