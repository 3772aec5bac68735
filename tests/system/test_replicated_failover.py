"""Replication under kill -9: three broker processes, replication factor 3, min.insync.replicas 2.

While a producer sends 100,000 acks=all messages, the leader of each partition and then the
controller are killed with SIGKILL and restarted. Afterwards every acknowledged message is read
back at exactly one offset, and all replicas hold identical batches up to the high watermark.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.support.failover_checks import batches_up_to, metadata, partition_states, wait_for
from tests.support.procs import consume_all

pytestmark = pytest.mark.slow

TOTAL = 100_000
PARTITIONS = 3








def fully_replicated(cluster, topic: str) -> bool:
    states = partition_states(cluster, topic)
    return len(states) == PARTITIONS and all(
        leader >= 0 and isr == [1, 2, 3] for leader, isr in states.values())


def kill_and_restart(cluster, broker_id: int) -> None:
    b = cluster.brokers[broker_id]
    b.kill(signal.SIGKILL)
    time.sleep(1.0)
    b.start()
    b.wait_listening()




def test_acks_all_survives_kill_minus_nine_of_leaders_and_controller(make_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=3, extra={
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
        "replica.fetch.backoff.ms": "200", "replica.lag.time.max.ms": "10000"})
    cluster.start()
    cluster.wait_registered()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("durable", PARTITIONS, 3)])["durable"].result(timeout=30)
    wait_for(lambda: fully_replicated(cluster, "durable"), 30, "topic fully replicated")

    acked: dict[tuple[int, int], bytes] = {}
    failed = [0]
    lock = threading.Lock()
    sent = [0]

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()
            else:
                failed[0] += 1

    def produce():
        # No retries: a retried batch whose first attempt was appended would be stored twice;
        # without idempotence, "exactly once per acknowledged message" needs single sends.
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                      "retries": 0, "enable.idempotence": False, "message.timeout.ms": 30000,
                      "batch.num.messages": 1000, "queue.buffering.max.messages": 20000})
        i = 0
        while i < TOTAL:
            try:
                p.produce("durable", value=b"v-%07d" % i, partition=i % PARTITIONS,
                          on_delivery=on_delivery)
                i += 1
                sent[0] = i
            except BufferError:
                p.poll(0.01)
                continue
            if i % 500 == 0:
                p.poll(0)
                time.sleep(0.005)  # spread the load over the failovers
        p.flush(60)

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_for(lambda: len(acked) > 5_000, 60, "first acknowledgements")
        # The leader of each partition in turn, then the controller.
        for p in range(PARTITIONS):
            leader = wait_for(lambda p=p: partition_states(cluster, "durable")[p][0] > 0 and
                              partition_states(cluster, "durable")[p][0], 60, f"leader of {p}")
            kill_and_restart(cluster, leader)
            time.sleep(1.0)
        controller = metadata(cluster, "durable").controller_id
        kill_and_restart(cluster, controller)
    finally:
        t.join(240)
    assert not t.is_alive(), "producer did not finish"
    assert sent[0] == TOTAL
    assert len(acked) > TOTAL // 2, f"only {len(acked)} of {TOTAL} acknowledged ({failed[0]} failed)"

    wait_for(lambda: fully_replicated(cluster, "durable"), 90, "every replica back in the ISR")
    # Every partition changed leader (or generation) at least once.
    md = metadata(cluster, "durable")
    epochs = {p.partition_index: p.leader_epoch for t in md.topics for p in t.partitions}
    assert all(e >= 1 for e in epochs.values()), epochs

    got, eof = consume_all(cluster.bootstrap, "durable", PARTITIONS, group="failover-check",
                           timeout=120)
    assert len(eof) == PARTITIONS, "did not reach the end of every partition"

    missing = [k for k, v in acked.items() if got.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged messages lost or moved, e.g. {missing[:5]}"
    values = list(got.values())
    assert len(values) == len(set(values)), "a message is stored at more than one offset"
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in got if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous"

    # Replicas identical up to the HW: stop everything cleanly, compare the segment files.
    hws = {p: len([1 for (q, _) in got if q == p]) for p in range(PARTITIONS)}
    cluster.stop()
    for p in range(PARTITIONS):
        copies = [batches_up_to(b.log_dir, "durable", p, hws[p]) for b in cluster.brokers.values()]
        assert copies[0] and all(c == copies[0] for c in copies[1:]), f"partition {p} diverged"
