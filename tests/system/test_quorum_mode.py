"""Brokers without ZooKeeper (issue 6's acceptance): three broker processes in quorum mode
(``--metadata quorum``, each a voter of the metadata quorum), no ZooKeeper started.

While a producer process sends acks=all messages and a consumer group of separate processes
consumes them, the broker whose quorum node leads is killed with SIGKILL and restarted, three
times; each time, while it is down, a topic is created through the survivors and the group's
membership changes (one member leaves, another joins). Checked:

- each time another broker's quorum node takes over in a higher epoch, the topic is created,
  and the group is stable again with every partition owned once;
- every topic created is there at the end, and the cluster forms again with all three brokers;
- every acknowledged message is read back at its offset with its value.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.support.cluster import ROOT
from tests.support.consumer_group_procs import ConsumerProc, stable
from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all
from tests.support.quorum_topics import try_create_topic

pytestmark = pytest.mark.slow

TOPIC = "events"
PARTITIONS = 6
ROUNDS = 3


@pytest.fixture
def quorum_cluster(tmp_path):
    cluster = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True, extra={
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
        "group.min.session.timeout.ms": "1000", "group.initial.rebalance.delay.ms": "500",
        "rebalance.backoff.ms": "500", "offsets.commit.interval.ms": "300",
        "controlled.shutdown.retry.backoff.ms": "500"})
    try:
        yield cluster
    finally:
        cluster.stop()




def test_the_cluster_keeps_working_while_the_quorum_leader_is_killed(quorum_cluster, tmp_path):
    cluster = quorum_cluster
    cluster.start()
    cluster.wait_registered(timeout=60)
    bootstrap = cluster.bootstrap
    wait_for(lambda: try_create_topic(bootstrap, TOPIC, PARTITIONS), 60, "the topic created")

    produced = tmp_path / "produced.jsonl"
    consumers: list[ConsumerProc] = []
    with open(tmp_path / "producer.stderr", "ab") as producer_err:
        producer = subprocess.Popen(
            [sys.executable, "-m", "tests.support.producer_process",
             json.dumps({"bootstrap": bootstrap, "topic": TOPIC, "out": str(produced)})],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=producer_err)
    try:
        consumers += [ConsumerProc(tmp_path, bootstrap, "g", f"c{i}", TOPIC) for i in range(3)]
        wait_for(lambda: stable(bootstrap, "g", 3, PARTITIONS), 90, "3 members own 6 partitions")
        killed_epochs: list[int] = []
        for round_ in range(ROUNDS):
            killed_epochs.append(_kill_the_quorum_leader(cluster, consumers, tmp_path, round_))
        assert killed_epochs == sorted(set(killed_epochs))
        producer.send_signal(signal.SIGTERM)
        producer.wait(120)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        for c in consumers:
            c.stop()

    topics = _topics(cluster)
    assert {TOPIC, *(f"new-{r}" for r in range(ROUNDS))} <= topics
    outcomes = [json.loads(line) for line in produced.read_text().splitlines()]
    acked = {tuple(o["ok"]): o["v"] for o in outcomes if "ok" in o}
    errors = [o["err"] for o in outcomes if "err" in o]
    assert producer.returncode == 0, "the producer did not stop cleanly"
    assert len(acked) > 1000, f"only {len(acked)} acknowledged: {errors[:3]}"
    got, eof = consume_all(bootstrap, TOPIC, PARTITIONS, group="check", timeout=120)
    assert eof == set(range(PARTITIONS))
    lost = [k for k, v in acked.items() if got.get(k) != v.encode()]
    assert not lost, f"{len(lost)} acknowledged messages not read back: {lost[:5]}"


def _kill_the_quorum_leader(cluster: ProcessCluster, consumers: list[ConsumerProc], base,
                            round_: int) -> int:
    """One round: SIGKILL the quorum leader's broker; while it is down, create a topic
    through the survivors and swap a group member; then restart it. Returns the epoch the
    killed broker led."""
    epoch, leader = wait_for(lambda: cluster.quorum_leader()[1] > 0 and cluster.quorum_leader(),
                             60, "a quorum leader")
    cluster.brokers[leader].kill(signal.SIGKILL)
    survivors = ",".join(b.address for i, b in cluster.brokers.items() if i != leader)
    _, new = wait_for(lambda: cluster.quorum_leader()[0] > epoch and cluster.quorum_leader(),
                      60, "a new quorum leader")
    assert new != leader
    wait_for(lambda: try_create_topic(survivors, f"new-{round_}", 2), 60,
             f"topic new-{round_} created")
    consumers.pop(0).stop()
    consumers.append(ConsumerProc(base, cluster.bootstrap, "g", f"j{round_}", TOPIC))
    wait_for(lambda: stable(survivors, "g", 3, PARTITIONS), 90,
             f"the group stable again (round {round_})")
    cluster.brokers[leader].start()
    cluster.brokers[leader].wait_listening()
    cluster.wait_registered(timeout=90)
    return epoch


def _topics(cluster: ProcessCluster) -> set[str]:
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    deadline = time.monotonic() + 30
    while True:
        try:
            b = cluster.brokers[1]
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                md = c.request(ApiKey.METADATA, {"topics": None})
            return {t.name for t in md.topics}
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
