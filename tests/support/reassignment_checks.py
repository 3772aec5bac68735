"""Short replication timers for controller tests (:data:`FAST`) and what they read back: a
partition's leader and ISR in the metadata store, and every record of a partition.
"""

from __future__ import annotations

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.records import decode_records
from tests.support.cluster import (
    call,
)

FAST = {"replica_lag_time_max_ms": "2000", "replica_fetch_wait_max_ms": "100",
        "replica_fetch_backoff_ms": "100", "controlled_shutdown_retry_backoff_ms": "200"}


async def zk_state(store, topic: str, p: int) -> paths.LeaderAndIsr:
    data, _ = await store.get(paths.leader_and_isr(topic, p))
    return paths.LeaderAndIsr.from_bytes(data)


async def read_all(broker, topic: str, p: int) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    while True:
        fetch = await call(broker, ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]})
        part = fetch.responses[0].partitions[0]
        assert part.error_code == 0, part
        records = list(decode_records(part.records))
        if not records:
            return values
        values += [r.value for r in records]
        offset += len(records)


