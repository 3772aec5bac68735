"""A partial partition (issue: availability): one broker cut off from the other brokers but not
from ZooKeeper, while a producer writes with acks=all to every partition.

Three broker processes, each in a network namespace of its own, ZooKeeper and the producer in a
hub namespace between them (:mod:`tests.support.netns`). A *cut* drops every packet between one
broker and the other brokers' listeners; its ZooKeeper session stays alive and the producer can
still reach it.

Run with the metadata in ZooKeeper and in the brokers' own Raft quorum (whose traffic the cut
leaves alone, as it leaves ZooKeeper's).

1. A leader that is not the controller is cut off. Before, it kept its partitions for the whole
   cut (nothing moved them: its registration was alive), so writes to them stalled until the
   heal. Now the controller fences it after ``broker.session.timeout.ms`` without heartbeats,
   its partitions get new leaders from their ISRs, and it gives them up itself (it cannot reach
   the controller, reads the new leaders from ZooKeeper): writes to them resume while the cut
   lasts. Healed, it rejoins every ISR.
2. The controller is cut off. Before, acks=all writes stalled on every partition for the whole
   cut (the ISR shrinks that drop the cut follower could only go to it). Now the other two
   brokers record that they cannot reach it, it resigns, one of them takes over and takes the
   ISR shrinks, and then fences the old controller and moves its partitions: every partition
   takes writes again while the cut lasts.

Every acknowledged write is read back at its offset at the end. The seconds each partition went
without an acknowledgement during each cut (measured by the producer) are printed: the figures
for docs/replication.md.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support import netns
from tests.support.cluster import BrokerProcess, free_port
from tests.support.failover_checks import wait_for
from tests.support.procs import consume_all
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

TOPIC = "cut"
#: Partition p's replicas; leaders 1, 2, 3, 1, 2, 3.
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]]
SESSION_MS = 4000
#: Acknowledgements (each later than one second after the cut) every partition of a group must
#: get before a cut is healed: writes resumed there while the cut lasted.
RESUMED_ACKS = 20
#: Longest a cut is kept while waiting for that; the old behaviour never gets there.
CUT_LIMIT_S = 45.0


@pytest.fixture
def network():
    reason = netns.available()
    if reason:
        pytest.skip(reason)
    net = netns.IsolatedNetwork([1, 2, 3])
    net.create()
    try:
        yield net
    finally:
        net.destroy()


class Acks:
    """What the producer had acknowledged: ``(partition, offset) -> value`` and, per partition,
    the (monotonic) times of its acknowledgements."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[tuple[int, int], bytes] = {}
        self.times: dict[int, list[float]] = {p: [] for p in range(len(ASSIGNMENT))}
        self.errors = 0

    def on_delivery(self, err, msg) -> None:
        now = time.monotonic()
        with self.lock:
            if err is not None:
                self.errors += 1
                return
            self.values[(msg.partition(), msg.offset())] = msg.value()
            self.times[msg.partition()].append(now)

    def count_after(self, partition: int, t: float) -> int:
        with self.lock:
            return sum(1 for x in self.times[partition] if x > t)

    def stall(self, partition: int, start: float, end: float) -> float:
        """The longest time within [start, end] without an acknowledgement of ``partition``."""
        with self.lock:
            inside = sorted(x for x in self.times[partition] if start < x < end)
        points = [start, *inside, end]
        return max(b - a for a, b in zip(points, points[1:], strict=False))


def metadata(brokers: dict[int, BrokerProcess], avoid: int | None = None):
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for bid, b in brokers.items():
        if bid == avoid:
            continue
        with BrokerConnection(b.host, b.port, timeout=5) as c:
            return c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]})
    raise AssertionError("no broker to ask")


def states(brokers, avoid=None) -> dict[int, tuple[int, list[int]]]:
    md = metadata(brokers, avoid)
    t = next(t for t in md.topics if t.name == TOPIC)
    return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}


def create_topic(brokers: dict[int, BrokerProcess]) -> None:
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    b = brokers[1]
    with BrokerConnection(b.host, b.port, timeout=30) as c:
        resp = c.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": TOPIC, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": r}
                            for p, r in enumerate(ASSIGNMENT)],
            "configs": []}], "timeout_ms": 20000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp


def fully_replicated(brokers) -> bool:
    s = states(brokers)
    return len(s) == len(ASSIGNMENT) and all(
        leader >= 0 and isr == [1, 2, 3] for leader, isr in s.values())


def cut_until_resumed(network, brokers, acks: Acks, victim: int,
                      watched: list[int]) -> tuple[float, float, bool]:
    """Cut ``victim`` off until every partition in ``watched`` took :data:`RESUMED_ACKS` writes
    (or :data:`CUT_LIMIT_S` passed), then heal. Returns (cut, heal) times and whether they all
    resumed."""
    network.cut(victim, {b: p.port for b, p in brokers.items()})
    t_cut = time.monotonic()
    resumed = False
    try:
        while time.monotonic() - t_cut < CUT_LIMIT_S:
            if all(acks.count_after(p, t_cut + 1.0) >= RESUMED_ACKS for p in watched):
                resumed = True
                break
            time.sleep(0.1)
    finally:
        network.heal(victim)
    return t_cut, time.monotonic(), resumed


@pytest.mark.parametrize("mode", ["zookeeper", "quorum"])
def test_a_cut_leader_and_a_cut_controller_lose_their_partitions_not_the_writes(
        network, tmp_path, mode):
    from confluent_kafka import Producer

    figures: dict[str, dict[int, float]] = {}
    with network.entered():
        zk = ZooKeeperServer() if mode == "zookeeper" else None
        brokers: dict[int, BrokerProcess] = {}
        stop = threading.Event()
        producer_thread = None
        try:
            voters = None
            if zk is not None:
                from kazoo.client import KazooClient

                zk.start()
                kz = KazooClient(hosts=zk.hosts)
                kz.start(timeout=15)
                kz.ensure_path("/sluice")
                kz.stop()
                kz.close()
            else:
                # Each broker's quorum node listens next to its Kafka listener; the cuts leave
                # the quorum's traffic alone (they drop only Kafka-listener packets).
                voters = ",".join(f"{b}@{network.host(b)}:{free_port()}" for b in (1, 2, 3))
            extra = {"zookeeper.session.timeout.ms": "6000",
                     "broker.session.timeout.ms": str(SESSION_MS),
                     "broker.heartbeat.interval.ms": "500",
                     "replica.lag.time.max.ms": "6000",
                     "replica.fetch.wait.max.ms": "50", "replica.fetch.backoff.ms": "200",
                     "min.insync.replicas": "2", "auto.create.topics.enable": "false"}
            for b in (1, 2, 3):
                zk_hosts = "" if zk is None else f"{network.gateway(b)}:{zk.port}/sluice"
                brokers[b] = BrokerProcess(
                    b, zk_hosts, tmp_path, extra=extra, quorum_voters=voters,
                    host=network.host(b), prefix=network.prefix(b))
                brokers[b].start()
            for b in brokers.values():
                b.wait_listening()
            bootstrap = ",".join(b.address for b in brokers.values())
            wait_for(lambda: len(metadata(brokers).brokers) == 3
                     and metadata(brokers).controller_id > 0, 30, "the cluster")
            create_topic(brokers)
            wait_for(lambda: fully_replicated(brokers), 60, "every partition fully replicated")

            acks = Acks()
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                 "linger.ms": 5, "enable.idempotence": False,
                                 "message.timeout.ms": 120000, "request.timeout.ms": 5000,
                                 "retry.backoff.ms": 100, "retries": 1000000})

            def produce() -> None:
                i = 0
                while not stop.is_set():
                    for p in range(len(ASSIGNMENT)):
                        try:
                            producer.produce(TOPIC, value=b"p%d-%07d" % (p, i), partition=p,
                                             on_delivery=acks.on_delivery)
                        except BufferError:
                            producer.poll(0.05)
                    i += 1
                    producer.poll(0.01)
                producer.flush(120)

            producer_thread = threading.Thread(target=produce)
            producer_thread.start()
            wait_for(lambda: all(acks.count_after(p, 0) > 200 for p in range(len(ASSIGNMENT))),
                     60, "first acknowledgements on every partition")

            # 1. A leader that is not the controller.
            md = metadata(brokers)
            controller = md.controller_id
            leaders = states(brokers)
            victim = next(b for b in (1, 2, 3) if b != controller)
            led = [p for p, (leader, _) in leaders.items() if leader == victim]
            assert led, leaders
            t_cut, t_heal, resumed = cut_until_resumed(network, brokers, acks, victim, led)
            figures["cut leader: its partitions"] = {
                p: acks.stall(p, t_cut, t_heal) for p in led}
            figures["cut leader: other partitions"] = {
                p: acks.stall(p, t_cut, t_heal) for p in range(len(ASSIGNMENT)) if p not in led}
            assert resumed, (f"writes to partitions {led} of the cut leader {victim} did not "
                             f"resume in {CUT_LIMIT_S}s of cut; stalls {figures}")
            moved = states(brokers)
            assert all(moved[p][0] != victim for p in led), moved
            wait_for(lambda: fully_replicated(brokers), 60,
                     "the cut leader back in every ISR after the heal")
            assert "considers itself fenced" in brokers[victim].log_text()

            # 2. The controller.
            controller = metadata(brokers).controller_id
            leaders = states(brokers)
            others = [p for p, (leader, _) in leaders.items() if leader != controller]
            own = [p for p in leaders if p not in others]
            t_cut, t_heal, resumed = cut_until_resumed(
                network, brokers, acks, controller, list(range(len(ASSIGNMENT))))
            figures["cut controller: partitions it did not lead"] = {
                p: acks.stall(p, t_cut, t_heal) for p in others}
            figures["cut controller: partitions it led"] = {
                p: acks.stall(p, t_cut, t_heal) for p in own}
            assert resumed, (f"with controller {controller} cut off, writes did not resume on "
                             f"every partition in {CUT_LIMIT_S}s; stalls {figures}")
            new_controller = metadata(brokers, avoid=controller).controller_id
            assert new_controller not in (-1, controller)
            wait_for(lambda: fully_replicated(brokers), 60,
                     "the old controller back in every ISR after the heal")
        finally:
            stop.set()
            if producer_thread is not None:
                producer_thread.join(150)
            try:
                if producer_thread is not None and not producer_thread.is_alive():
                    read, eof = consume_all(",".join(b.address for b in brokers.values()),
                                            TOPIC, len(ASSIGNMENT), group="cut-check")
                else:
                    read, eof = {}, set()
            finally:
                for b in brokers.values():
                    b.stop()
                if zk is not None:
                    zk.stop()

    print("\nseconds without an acknowledgement during each cut, per partition:")
    print(json.dumps({k: {p: round(s, 2) for p, s in v.items()} for k, v in figures.items()},
                     indent=1))
    assert producer_thread is not None and not producer_thread.is_alive()
    assert eof == set(range(len(ASSIGNMENT)))
    lost = [k for k, v in acks.values.items() if read.get(k) != v]
    assert not lost, f"{len(lost)} acknowledged writes lost or moved, e.g. {sorted(lost)[:5]}"
