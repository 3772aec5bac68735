"""Idempotent producers of kafka-python (its default) and confluent-kafka
(``enable.idempotence=True``) against three broker processes, in both metadata modes
(ZooKeeper and the quorum): replication factor 3, ``min.insync.replicas=2``, acks=all, 100,000
messages while partition leaders are killed with SIGKILL and restarted.

Message ``i`` goes to partition ``i % 3`` with the value ``i``. Afterwards every acknowledged
message is read back exactly once, no message at all is stored twice (a retried batch is
answered with its original offsets, not appended again), and each partition holds its values in
the order they were sent.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import pytest

from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all
from tests.support.quorum_topics import try_create_topic

pytestmark = pytest.mark.slow

TOTAL = 100_000
PARTITIONS = 3
TOPIC = "exactly-once"
#: Kill a partition leader when this many messages are acknowledged.
KILL_AT = (15_000, 40_000, 65_000)
#: The producer sends at most this far past a kill's threshold before the kill: batches are in
#: flight when the leader dies, whatever the client's speed.
AHEAD = 5_000


def _states(cluster: ProcessCluster) -> dict[int, tuple[int, list[int]]]:
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for b in cluster.brokers.values():
        if b.proc is None or b.proc.poll() is not None:
            continue
        try:
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                md = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}],
                                                 "allow_auto_topic_creation": False})
        except OSError:
            continue
        return {p.partition_index: (p.leader_id, sorted(p.isr_nodes))
                for t in md.topics if t.name == TOPIC for p in t.partitions}
    return {}


def _fully_replicated(cluster: ProcessCluster) -> bool:
    states = _states(cluster)
    return len(states) == PARTITIONS and all(
        leader > 0 and isr == [1, 2, 3] for leader, isr in states.values())


class KafkaPythonProducer:
    """kafka-python's producer as its users get it: idempotence on by default."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5,
                               request_timeout_ms=10_000, delivery_timeout_ms=120_000,
                               max_block_ms=120_000, retry_backoff_ms=100)
        assert self.p.config["enable_idempotence"]
        assert self.p.config["acks"] == -1  # "all", which idempotence requires

    def send(self, i: int, on_ack) -> None:
        future = self.p.send(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
        future.add_callback(lambda meta: on_ack(i, meta.partition, meta.offset))

    def pause_until(self, event: threading.Event) -> None:
        event.wait(300)  # the client's own threads go on delivering

    def close(self) -> None:
        self.p.flush(timeout=180)
        self.p.close(timeout=30)


class ConfluentProducer:
    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000,
                           "queue.buffering.max.messages": 20_000})
        self.on_ack = None

    def send(self, i: int, on_ack) -> None:
        def delivered(err, msg):
            if err is None:
                on_ack(i, msg.partition(), msg.offset())

        while True:
            try:
                self.p.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS,
                               on_delivery=delivered)
                break
            except BufferError:
                self.p.poll(0.1)
        self.p.poll(0)

    def pause_until(self, event: threading.Event) -> None:
        # Delivery reports reach the callbacks only from poll().
        deadline = time.monotonic() + 300
        while not event.is_set() and time.monotonic() < deadline:
            self.p.poll(0.1)

    def close(self) -> None:
        try:
            assert self.p.flush(180) == 0, "messages left undelivered"
        finally:
            self.p = None  # the last reference: librdkafka's handle and threads go


def kill_leaders(cluster: ProcessCluster, acked: dict, worker: threading.Thread,
                 kills_done: list[threading.Event], killed: list[int]) -> None:
    """At each of :data:`KILL_AT` acknowledged messages, SIGKILL the leader of one partition,
    restart it and wait until it is back in every ISR."""
    for n, threshold in enumerate(KILL_AT):
        wait_for(lambda t=threshold: len(acked) >= t or not worker.is_alive(), 300,
                 f"{threshold} messages acknowledged")
        if not worker.is_alive():
            break
        victim = _states(cluster)[n % PARTITIONS][0]
        broker = cluster.brokers[victim]
        broker.kill(signal.SIGKILL)
        killed.append(victim)
        kills_done[n].set()
        time.sleep(1.0)  # an outage, not a wait: producers meet the dead leader meanwhile
        # Registered anew first: until its old session expires, the metadata still shows the
        # killed incarnation in every ISR, and the next kill must not come before it is back.
        cluster.restart(victim)
        wait_for(lambda: _fully_replicated(cluster), 120,
                 f"broker {victim} back in every ISR")


CLIENTS = {"kafka-python": KafkaPythonProducer, "confluent-kafka": ConfluentProducer}


@pytest.mark.parametrize("mode", ["zookeeper", "quorum"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_every_acknowledged_message_once_and_in_order_across_kill_minus_nine(
        client, mode, request, tmp_path):
    extra = {"min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
             "replica.fetch.backoff.ms": "200", "replica.lag.time.max.ms": "10000"}
    if mode == "zookeeper":
        zk = request.getfixturevalue("zookeeper_server")
        cluster = ProcessCluster(zk.hosts, tmp_path / "cluster", size=3, extra=extra)
    else:
        cluster = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True, extra=extra)
    try:
        cluster.start()
        cluster.wait_registered(timeout=60)
        wait_for(lambda: try_create_topic(cluster.bootstrap, TOPIC, PARTITIONS), 60,
                 "the topic created")
        wait_for(lambda: _fully_replicated(cluster), 60, "every partition with 3 in sync")

        acked: dict[int, tuple[int, int]] = {}
        lock = threading.Lock()

        def on_ack(i: int, partition: int, offset: int) -> None:
            with lock:
                acked[i] = (partition, offset)

        producer = CLIENTS[client](cluster.bootstrap)
        errors: list[BaseException] = []

        kills_done = [threading.Event() for _ in KILL_AT]

        def produce() -> None:
            try:
                for i in range(TOTAL):
                    for threshold, done in zip(KILL_AT, kills_done, strict=True):
                        if i == threshold + AHEAD:
                            producer.pause_until(done)
                    producer.send(i, on_ack)
                producer.close()
            except BaseException as e:  # reported by the test's thread
                errors.append(e)

        worker = threading.Thread(target=produce, name="producer", daemon=True)
        worker.start()
        killed = []
        try:
            kill_leaders(cluster, acked, worker, kills_done, killed)
        finally:
            for done in kills_done:
                done.set()  # never leave the producer waiting, whatever happened
        worker.join(600)
        assert not worker.is_alive(), "the producer did not finish"
        assert not errors, errors
        assert len(killed) == len(KILL_AT), "the producer finished before every kill"

        got, eof = consume_all(cluster.bootstrap, TOPIC, PARTITIONS, group="check",
                               timeout=180)
        assert eof == set(range(PARTITIONS))
        values = Counter(int(v) for v in got.values())
        twice = [v for v, n in values.items() if n > 1]
        assert not twice, f"{len(twice)} messages stored more than once: {twice[:5]}"
        missing = [i for i, (p, o) in acked.items() if got.get((p, o)) != str(i).encode()]
        assert not missing, f"{len(missing)} acknowledged messages not at their offsets"
        for p in range(PARTITIONS):
            in_log = [int(v) for (part, _o), v in sorted(got.items()) if part == p]
            assert all(v % PARTITIONS == p for v in in_log)
            assert in_log == sorted(in_log), f"partition {p} is out of order"
        # The clients' acknowledgements covered nearly everything (a message may fail only
        # when its batch was in flight to a killed leader and the producer reset its epoch).
        assert len(acked) >= TOTAL - 5_000, f"only {len(acked)} of {TOTAL} acknowledged"
    finally:
        cluster.stop()
