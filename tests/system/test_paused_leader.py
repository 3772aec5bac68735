"""Two leaders in transition: a leader that stops (SIGSTOP, like a long GC pause) past its ZooKeeper
session timeout while producers write to it, then resumes.

The controller replaces it while it is stopped. When it resumes it still believes it leads with
the old ISR, but it can commit nothing: the new leader no longer fetches from it, so its HW cannot
move, and it cannot shrink the ISR because only the controller writes the ISR (AlterIsr is
refused for its stale epoch). It learns of its replacement, becomes a follower, truncates by
epoch, and the replicas end identical. Every message acknowledged (acks=all) is read back at the
offset it was acknowledged at.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.support.failover_checks import batches_up_to, partition_states, wait_for
from tests.support.procs import consume_all

pytestmark = pytest.mark.slow

SESSION_MS = 4000


def test_paused_leader_commits_nothing_after_it_was_replaced(make_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=3, extra={
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
        "replica.fetch.backoff.ms": "200", "zookeeper.session.timeout.ms": str(SESSION_MS)})
    cluster.start()
    cluster.wait_registered()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("paused", 1, 3)])["paused"].result(timeout=30)
    wait_for(lambda: fully_replicated_one(cluster), 30, "partition fully replicated")
    old_leader = partition_states(cluster, "paused")[0][0]

    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[msg.offset()] = msg.value()

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2,
                      "retries": 0, "enable.idempotence": False, "message.timeout.ms": 20000,
                      "request.timeout.ms": 15000})
        i = 0
        while not stop.is_set():
            try:
                p.produce("paused", value=b"m-%07d" % i, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
                continue
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.01)
        p.flush(30)

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_for(lambda: len(acked) > 2_000, 60, "first acknowledgements")
        leader = cluster.brokers[old_leader]
        leader.kill(signal.SIGSTOP)
        try:
            # Replaced once its session has expired.
            new_leader = wait_for(
                lambda: (lambda s: s[0] not in (-1, old_leader) and s[0])(
                    partition_states_from_others(cluster, old_leader)[0]),
                SESSION_MS / 1000 * 5, "a new leader")
            time.sleep(2.0)  # producers now write to the new leader
        finally:
            leader.kill(signal.SIGCONT)
        wait_for(lambda: len(acked) > 6_000, 60, "acknowledgements after the pause")
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    assert new_leader != old_leader

    wait_for(lambda: fully_replicated_one(cluster), 60, "old leader back in the ISR")
    read, eof = consume_all(cluster.bootstrap, "paused", 1, group="paused-check")
    got = {offset: value for (_, offset), value in read.items()}
    assert eof == {0}
    lost = [o for o, v in acked.items() if got.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged messages lost or moved, e.g. {lost[:5]}"
    assert len(set(got.values())) == len(got), "a message is stored twice"

    old_log = cluster.brokers[old_leader].log_text()
    assert "following broker" in old_log  # it stepped down
    hw = len(got)
    cluster.stop()
    copies = [batches_up_to(b.log_dir, "paused", 0, hw) for b in cluster.brokers.values()]
    assert copies[0] and all(c == copies[0] for c in copies[1:]), "replicas diverged"


def fully_replicated_one(cluster) -> bool:
    leader, isr = partition_states(cluster, "paused")[0]
    return leader >= 0 and isr == [1, 2, 3]


def partition_states_from_others(cluster, paused: int):
    """Metadata from a broker other than the paused one (it cannot answer)."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for bid, b in cluster.brokers.items():
        if bid == paused:
            continue
        with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
            md = c.request(ApiKey.METADATA, {"topics": [{"name": "paused"}]})
        t = next(t for t in md.topics if t.name == "paused")
        return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}
    raise AssertionError("no other broker")
