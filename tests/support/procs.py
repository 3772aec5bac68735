"""A cluster of broker processes in its own ZooKeeper chroot, for system and interop tests."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from kazoo.client import KazooClient

from tests.support.cli_runs import eventually
from tests.support.cluster import BrokerProcess, free_port

#: The line a quorum node logs when it becomes leader (``RaftDriver``).
_LEADS = re.compile(r"quorum node (\d+) leads epoch (\d+)")


class ProcessCluster:
    """``size`` brokers (ids 1..size) as ``twistd`` processes sharing a fresh chroot; with
    ``metrics``, each serves /metrics (:meth:`BrokerProcess.metric`).

    With ``quorum`` (and no ZooKeeper: ``zk_base_hosts`` None) the brokers run in quorum mode,
    every one a voter; the voters' ports are picked here, before any broker starts.

    ``listeners`` gives every broker the same named listeners (see :class:`BrokerProcess`);
    :meth:`bootstrap_of` lists one listener's addresses. ``quorum_protocol`` is every broker's
    quorum listener's protocol (its TLS keys go in ``extra``)."""

    def __init__(self, zk_base_hosts: str | None, base: Path, size: int = 3,
                 extra: dict[str, str] | None = None, metrics: bool = False,
                 quorum: bool = False,
                 listeners: Sequence[tuple[str, str]] | None = None,
                 quorum_protocol: str | None = None) -> None:
        self.base = base
        self.quorum_ports: dict[int, int] = {}
        voters = None
        if quorum:
            self.chroot = ""
            self.zk_hosts = ""
            self.quorum_ports = {i: free_port() for i in range(1, size + 1)}
            voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.quorum_ports.items())
        else:
            assert zk_base_hosts is not None, "ZooKeeper mode needs ZooKeeper"
            self.chroot = f"/sluice-{uuid.uuid4().hex[:10]}"
            zk = KazooClient(hosts=zk_base_hosts)
            zk.start(timeout=15)
            try:
                zk.ensure_path(self.chroot)
            finally:
                zk.stop()
                zk.close()
            self.zk_hosts = zk_base_hosts + self.chroot
        self.brokers = {i: BrokerProcess(i, self.zk_hosts, base, extra=extra, metrics=metrics,
                                         quorum_voters=voters, listeners=listeners,
                                         quorum_protocol=quorum_protocol)
                        for i in range(1, size + 1)}

    def quorum_leader(self) -> tuple[int, int]:
        """``(epoch, broker id)`` of the highest epoch a broker's quorum node led, as the
        brokers' logs say (every node logs when it becomes leader); ``(-1, -1)`` before any."""
        best = (-1, -1)
        for i, b in self.brokers.items():
            for m in _LEADS.finditer(b.log_text()):
                if int(m.group(1)) == i:
                    best = max(best, (int(m.group(2)), i))
        return best

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    def bootstrap_of(self, listener: str) -> str:
        """Every broker's address on the named ``listener``."""
        return ",".join(b.address_of(listener) for b in self.brokers.values())

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

    def restart(self, broker_id: int, timeout: float = 120.0) -> None:
        """Start a stopped or killed broker again; return once this incarnation has registered
        and every running broker's Metadata lists all of them. After a SIGKILL the previous
        incarnation's registration lingers until its ZooKeeper session expires, so the broker
        count alone cannot tell the new one is there: its log (which survives restarts) can."""
        b = self.brokers[broker_id]
        line = f"registered /brokers/ids/{broker_id} "
        before = b.log_text().count(line)
        b.start()
        b.wait_listening()

        def registered_again() -> bool:
            if b.proc is not None and b.proc.poll() is not None:
                raise RuntimeError(f"broker {broker_id} exited: {b.log_tail()}")
            return b.log_text().count(line) > before
        eventually(registered_again, timeout, f"broker {broker_id} registered again")
        self.wait_registered(timeout=timeout)

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
