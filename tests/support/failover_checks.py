"""What the broker-process failover tests read back: partition states, a log's batches read
from disk, and a wait on a condition.
"""

from __future__ import annotations

import time
from pathlib import Path


def metadata(cluster, topic: str):
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for b in cluster.brokers.values():
        if b.proc is None or b.proc.poll() is not None:
            continue
        try:
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                return c.request(ApiKey.METADATA, {"topics": [{"name": topic}]})
        except OSError:
            continue
    raise AssertionError("no broker answers Metadata")


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (OSError, AssertionError, KeyError, StopIteration):
            value = None  # a broker just restarted may answer before it has metadata
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def partition_states(cluster, topic: str) -> dict[int, tuple[int, list[int]]]:
    md = metadata(cluster, topic)
    t = next(t for t in md.topics if t.name == topic)
    return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}


def batches_up_to(log_dir: Path, topic: str, partition: int, end: int) -> list[bytes]:
    """Raw batches below ``end`` read from a stopped broker's segment files."""
    from broker_core.wire.records import iter_batches

    out = []
    pdir = log_dir / f"{topic}-{partition}"
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        for info in iter_batches(data):
            if info.last_offset < end:
                out.append(data[info.position:info.position + info.size])
    return out


