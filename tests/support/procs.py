"""A cluster of broker processes in its own ZooKeeper chroot, for system and interop tests."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from tests.support.cluster import BrokerProcess


class ProcessCluster:
    """``size`` brokers (ids 1..size) as ``twistd`` processes sharing a fresh chroot; with
    ``metrics``, each serves /metrics (:meth:`BrokerProcess.metric`)."""

    def __init__(self, zk_base_hosts: str, base: Path, size: int = 3,
                 extra: dict[str, str] | None = None, metrics: bool = False) -> None:
        self.chroot = f"/sluice-{uuid.uuid4().hex[:10]}"
        zk = KazooClient(hosts=zk_base_hosts)
        zk.start(timeout=15)
        try:
            zk.ensure_path(self.chroot)
        finally:
            zk.stop()
            zk.close()
        self.zk_hosts = zk_base_hosts + self.chroot
        self.base = base
        self.brokers = {i: BrokerProcess(i, self.zk_hosts, base, extra=extra, metrics=metrics)
                        for i in range(1, size + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    def start(self) -> None:
        for b in self.brokers.values():
            b.start()
        for b in self.brokers.values():
            b.wait_listening()

    def wait_registered(self, n: int | None = None, timeout: float = 30.0) -> None:
        """Until Metadata from every running broker lists ``n`` brokers and a controller."""
        from broker_core.wire.apis import ApiKey
        from consumer_client.connection import BrokerConnection

        n = n or len(self.brokers)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                ok = True
                for b in self.brokers.values():
                    if b.proc is None or b.proc.poll() is not None:
                        continue
                    with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                        md = c.request(ApiKey.METADATA, {"topics": []})
                        last = md
                        if len(md.brokers) < n or md.controller_id < 0:
                            ok = False
                if ok:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"cluster did not form in {timeout}s; last metadata {last}")

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()


def consume_all(bootstrap: str, topic: str, partitions: int, *, group: str,
                timeout: float = 60.0) -> tuple[dict[tuple[int, int], bytes], set[int]]:
    """Read ``topic`` from offset 0 to its end with confluent-kafka (CRCs checked). Returns
    ``{(partition, offset): value}`` and the partitions whose end was reached within
    ``timeout``; any error other than end-of-partition fails the caller's test."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "check.crcs": True,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[tuple[int, int], bytes] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=1):
                if msg.error():
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                got[(msg.partition(), msg.offset())] = msg.value()
    finally:
        consumer.close()
    return got, eof
