"""A log directory that fills up (KIP-112), with real broker processes and a real small
filesystem: three brokers, replication factor 3, min.insync.replicas 2, a producer writing with
acks=all, and broker 3's log directory on a 4 MiB tmpfs mount.

- One of broker 3's two directories fills: that directory goes offline, broker 3 stops
  serving its partitions, the controller moves their leadership to the other brokers and drops
  broker 3 from their ISRs; broker 3 keeps serving the partitions of its other directory (and
  stays in their ISRs); acks=all writes to the moved partitions resume and nothing
  acknowledged is lost. In both metadata modes (ZooKeeper, and the Raft quorum).
- Every directory of broker 3 fills (one, or both of two): it shuts down, saying why, and the
  others carry on.

Needs root for the mounts (skipped otherwise); every mount is unmounted at teardown.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.cluster import free_port
from tests.support.failover_checks import partition_states, wait_for
from tests.support.procs import ProcessCluster, consume_all

pytestmark = pytest.mark.slow

TOPIC = "filling"
PARTITIONS = 6
#: Replicas per partition, the preferred (first) leader first: broker 3 leads some partitions
#: and follows others, so that its failing directory holds both kinds (a new partition goes to
#: the directory with the fewest partitions, the first on a tie: the two alternate).
ASSIGNMENT = {0: [3, 1, 2], 1: [3, 2, 1], 2: [2, 3, 1], 3: [1, 3, 2], 4: [3, 1, 2],
              5: [3, 2, 1]}
VALUE = 1024


@pytest.fixture
def small_mounts(tmp_path):
    """``mount(name)``: a fresh 4 MiB tmpfs at ``tmp_path / name``; all unmounted at teardown
    (request this fixture before ``make_cluster``, so the brokers stop first)."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "4m") -> Path:
        if os.geteuid() != 0:
            pytest.skip("cannot mount a tmpfs: not root")
        d = tmp_path / name
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                       check=True, capture_output=True, timeout=30)
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        done = subprocess.run(["umount", str(d)], capture_output=True, timeout=30)
        if done.returncode != 0:  # still busy (a process we started has not gone yet)
            subprocess.run(["umount", "--lazy", str(d)], check=True, capture_output=True,
                           timeout=30)


class AckingProducer:
    """A producer thread writing 1 KiB values with acks=all to every partition until stopped;
    ``acked`` maps ``(partition, offset)`` to the value acknowledged there."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: dict[tuple[int, int], bytes] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="acking-producer", daemon=True)

    def count(self, partitions=None) -> int:
        with self.lock:
            if partitions is None:
                return len(self.acked)
            return sum(1 for p, _ in self.acked if p in partitions)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            with self.lock:
                self.acked[(msg.partition(), msg.offset())] = msg.value()

    def _run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": False, "message.timeout.ms": 60000,
                      "request.timeout.ms": 15000, "retry.backoff.ms": 200})
        i = 0
        while not self.stop_event.is_set():
            value = (b"m-%08d-" % i).ljust(VALUE, b".")
            try:
                p.produce(TOPIC, value=value, partition=i % PARTITIONS,
                          on_delivery=self._on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
                continue
            if i % 50 == 0:
                p.poll(0)
                time.sleep(0.005)
        p.flush(60)

    def __enter__(self) -> AckingProducer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(90)
        assert not self.thread.is_alive(), "the producer did not finish"


@pytest.fixture
def clusters(request, tmp_path):
    """``make(mode)``: a three-broker cluster in ``mode`` ("zookeeper": a fresh chroot of the
    session's ZooKeeper; "quorum": every broker a voter, no ZooKeeper), not started; all are
    stopped at teardown."""
    made: list[ProcessCluster] = []
    extra = {"min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
             "replica.fetch.backoff.ms": "200", "replica.lag.time.max.ms": "10000"}

    def make(mode: str) -> ProcessCluster:
        base = tmp_path / f"c{len(made)}"
        if mode == "quorum":
            c = ProcessCluster(None, base, size=3, quorum=True, extra=extra)
        else:
            zk = request.getfixturevalue("zookeeper_server")
            c = ProcessCluster(zk.hosts, base, size=3, extra=extra)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def start_cluster(make, mode: str, broker3_dirs: list[Path], quorum_dir: Path | None = None):
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    cluster = make(mode)
    b3 = cluster.brokers[3]
    b3.metrics_port = free_port()
    b3.extra["metrics.listener"] = f"tcp:{b3.metrics_port}:interface=127.0.0.1"
    # Broker 3's log.dirs: several directories, comma-separated (passed as --log-dir).
    b3.log_dir = ",".join(str(d) for d in broker3_dirs)
    if quorum_dir is not None:
        b3.extra["quorum.data.dir"] = str(quorum_dir)
    cluster.start()
    cluster.wait_registered()
    with BrokerConnection("127.0.0.1", cluster.brokers[1].port, timeout=30) as c:
        resp = c.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": p, "broker_ids": ASSIGNMENT[p]}
                                        for p in range(PARTITIONS)],
                        "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp
    wait_for(lambda: all(leader >= 0 and isr == [1, 2, 3]
                         for leader, isr in partition_states(cluster, TOPIC).values())
             and len(partition_states(cluster, TOPIC)) == PARTITIONS, 60,
             "every partition led, with all its replicas in its ISR")
    # That says nothing of the replicas themselves: a new partition's ISR is its whole
    # assignment from the start, and the controller publishes it (UpdateMetadata, and so the
    # answer to CreateTopics) while its LeaderAndIsr to the replicas may still be on the way.
    # The tests look at where each replica's log went, so they wait for every log to exist.
    wait_for(lambda: all(len(replica_dirs(cluster.brokers[b], p)) == 1
                         for p, replicas in ASSIGNMENT.items() for b in replicas), 60,
             "every replica's log created")
    return cluster


def replica_dirs(broker, partition: int) -> list[Path]:
    """The directories of ``broker``'s log directories holding a log of ``partition``."""
    return [d for d in (Path(ld) for ld in str(broker.log_dir).split(","))
            if (d / f"{TOPIC}-{partition}").is_dir()]


def states_from(cluster, broker_ids) -> dict[int, tuple[int, list[int]]]:
    """Partition states as brokers ``broker_ids`` answer them (not the failing one)."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for bid in broker_ids:
        b = cluster.brokers[bid]
        with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
            md = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]})
        t = next(t for t in md.topics if t.name == TOPIC)
        return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}
    raise AssertionError("no broker to ask")


def check_nothing_lost(cluster, acked: dict[tuple[int, int], bytes]) -> None:
    read, eof = consume_all(cluster.bootstrap, TOPIC, PARTITIONS, group="check", timeout=120)
    assert eof == set(range(PARTITIONS))
    lost = [k for k, v in acked.items() if read.get(k) != v]
    assert not lost, f"{len(lost)} acknowledged messages lost or moved, e.g. {sorted(lost)[:5]}"


@pytest.mark.parametrize("mode", ["zookeeper", "quorum"])
def test_a_full_log_directory_goes_offline_and_leadership_moves_away(small_mounts, clusters,
                                                                     tmp_path, mode):
    small = small_mounts("small")
    roomy = tmp_path / "roomy"
    # The roomy directory first: in quorum mode the quorum's data defaults into it.
    cluster = start_cluster(clusters, mode, [roomy, small])
    b3 = cluster.brokers[3]
    on_small = {p for p in range(PARTITIONS) if (small / f"{TOPIC}-{p}").is_dir()}
    on_roomy = {p for p in range(PARTITIONS) if (roomy / f"{TOPIC}-{p}").is_dir()}
    assert on_small and on_roomy and on_small | on_roomy == set(range(PARTITIONS))
    for d in (roomy, small):  # each directory stamped as broker 3's, of this cluster
        assert "broker.id=3" in (d / "meta.properties").read_text()
    before = partition_states(cluster, TOPIC)
    led, followed = ({p for p in on_small if before[p][0] == 3},
                     {p for p in on_small if before[p][0] != 3})
    assert led and followed, (on_small, before)  # both cases of the failing directory

    with AckingProducer(cluster.bootstrap) as producer:
        wait_for(lambda: "is OFFLINE after an I/O error" in b3.log_text(), 180,
                 f"broker 3's directory {small} to fill and go offline")
        offline_at, acked_then = time.monotonic(), producer.count(on_small)

        def moved():
            states = states_from(cluster, [1, 2])
            return all(states[p][0] in (1, 2) and 3 not in states[p][1] for p in on_small) \
                and states
        states = wait_for(moved, 60, "leadership and ISR places of the failed replicas to move")
        wait_for(lambda: producer.count(on_small) > acked_then + 1_000, 120,
                 "acks=all writes to the moved partitions to resume")
        resumed_s = time.monotonic() - offline_at
    assert b3.proc.poll() is None, "broker 3 stopped: " + b3.log_tail()
    assert b3.metric("sluice_offline_log_directory_count") == 1
    assert b3.metric("sluice_log_directory_online", log_dir=str(small)) == 0
    assert b3.metric("sluice_log_directory_online", log_dir=str(roomy)) == 1
    text = b3.log_text()
    assert "ENOSPC" in text
    # Logged when the notification is written, which the controller may act on first.
    wait_for(lambda: "told the controller that log directories" in b3.log_text(), 30,
             "broker 3 to log its report to the controller")
    text = b3.log_text()
    # Its other directory is still served: broker 3 is in those ISRs (its replicas caught up).
    wait_for(lambda: all(3 in states_from(cluster, [1, 2])[p][1] for p in on_roomy), 60,
             "broker 3 in the ISRs of the partitions on its healthy directory")
    assert all(3 not in states_from(cluster, [1, 2])[p][1] for p in on_small)
    controller_logs = cluster.brokers[1].log_text() + cluster.brokers[2].log_text() + text
    assert "log directory failure notifications from brokers [3]" in controller_logs
    assert all(states[p][0] == before[p][0] for p in followed)  # only the ISR changed there
    check_nothing_lost(cluster, producer.acked)
    print(f"\n{mode}: 1,000 more acks=all writes to the moved partitions {resumed_s:.1f} s "
          f"after the directory went offline ({producer.count()} acks in all); "
          f"states {states}")

    # The operator's repair: stop broker 3, make room, start it again. The failed directory was
    # left as it was (no clean-shutdown marker: it is recovered) and its replicas come back.
    b3.stop()
    assert not (small / ".clean-shutdown").exists()
    # Its controlled shutdown took it out of every ISR; wait until the metadata says so, or
    # the wait for it to come back below could pass on the state from before the stop.
    wait_for(lambda: all(3 not in isr for _, isr in partition_states(cluster, TOPIC).values()),
             60, "broker 3 out of every ISR once stopped")
    subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True,
                   capture_output=True, timeout=30)
    b3.start()
    b3.wait_listening()
    wait_for(lambda: all(isr == [1, 2, 3] for _, isr in partition_states(cluster, TOPIC)
                         .values()), 120, "broker 3 back in every ISR after its restart")
    assert b3.metric("sluice_offline_log_directory_count") == 0
    assert f"log directory {small} was not shut down cleanly: recovering" in b3.log_text()


@pytest.mark.parametrize(("mode", "dirs"), [("zookeeper", 1), ("zookeeper", 2), ("quorum", 2)])
def test_a_broker_whose_every_log_directory_fails_shuts_down(small_mounts, clusters, tmp_path,
                                                             mode, dirs):
    mounts = [small_mounts(f"small-{i}") for i in range(dirs)]
    # In quorum mode the quorum's data goes elsewhere (by default it would share the first
    # small directory's fate, which is not what this test is about).
    quorum_dir = tmp_path / "quorum-3" if mode == "quorum" else None
    cluster = start_cluster(clusters, mode, mounts, quorum_dir=quorum_dir)
    b3 = cluster.brokers[3]
    with AckingProducer(cluster.bootstrap) as producer:
        wait_for(lambda: b3.proc.poll() is not None, 240, "broker 3 to shut down")
        stopped = producer.count()
        wait_for(lambda: producer.count() > stopped + 2_000, 120,
                 "acks=all writes to go on without broker 3")
    assert b3.proc.returncode == 1
    text = b3.log_text()
    assert "every log directory is offline" in text and "shutting down broker 3" in text
    assert all(str(d) in text for d in mounts)
    assert "stopped cleanly" in text
    # The controller's moves reach the other brokers' metadata asynchronously (the acks above
    # may all be on partitions that moved first): wait for every one.
    wait_for(lambda: all(leader in (1, 2) and 3 not in isr
                         for leader, isr in states_from(cluster, [1, 2]).values()), 60,
             "every leadership and ISR place of broker 3 to move")
    check_nothing_lost(cluster, producer.acked)
