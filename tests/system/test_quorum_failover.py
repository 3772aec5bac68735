"""A partition leader killed in quorum mode: three broker processes in quorum mode (every one
a voter of the metadata quorum, no ZooKeeper), a producer process writing acks=all.

The broker killed with SIGKILL is the one whose quorum node leads, so a quorum election stacks
on the expiry of the dead broker's metadata session (the case a new quorum leader used to
answer with a whole session timeout). Checked:

- every partition the dead broker led takes acknowledged acks=all writes again, on the
  survivors, and the dead broker is gone from Metadata (its session expired through the log);
- the survivors then stop (SIGTERM, without controlled shutdown), the controller last: its
  broker change for the other survivor cannot be written (the quorum lost its majority), and is
  abandoned when it stops; no line of either survivor's log is critical, and each says it
  stopped cleanly (the old code logged "controller event broker_change failed" as critical);
- every acknowledged message is read back at its offset with its value.

How long the failover takes is measured by ``bench/mode_failover.py``, not asserted here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from broker_core.wire.apis import ApiKey
from consumer_client.connection import BrokerConnection
from tests.support.cluster import ROOT
from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all
from tests.support.quorum_topics import try_create_topic

pytestmark = pytest.mark.slow

TOPIC = "writes"
PARTITIONS = 6


def _metadata(cluster: ProcessCluster, broker: int):
    with BrokerConnection("127.0.0.1", cluster.brokers[broker].port, timeout=5) as c:
        return c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}],
                                           "allow_auto_topic_creation": False})


def _fully_replicated(cluster: ProcessCluster):
    md = _metadata(cluster, 1)
    parts = [p for t in md.topics for p in t.partitions]
    ok = len(parts) == PARTITIONS and all(p.leader_id > 0 and len(p.isr_nodes) == 3
                                          for p in parts)
    return md if ok else None


def _acked(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_writes_resume_after_the_quorum_leaders_broker_is_killed(tmp_path):
    cluster = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True, extra={
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50",
        # The stop below is a plain one: the controller's broker change for the survivor that
        # stops first has leaderships to move and ISRs to shrink, which cannot commit once
        # that survivor's quorum node is gone (one voter of three left).
        "controlled.shutdown.enable": "false"})
    produced = tmp_path / "produced.jsonl"
    producer = None
    try:
        cluster.start()
        cluster.wait_registered(timeout=60)
        wait_for(lambda: try_create_topic(cluster.bootstrap, TOPIC, PARTITIONS), 60,
                 "the topic created")
        wait_for(lambda: _fully_replicated(cluster), 60, "every partition with 3 in sync")
        with open(tmp_path / "producer.stderr", "ab") as err:
            producer = subprocess.Popen(
                [sys.executable, "-m", "tests.support.producer_process",
                 json.dumps({"bootstrap": cluster.bootstrap, "topic": TOPIC,
                             "out": str(produced)})],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        wait_for(lambda: produced.exists() and len(_acked(produced)) >= 200, 60,
                 "the producer under way")

        _, victim = wait_for(lambda: cluster.quorum_leader()[1] > 0 and cluster.quorum_leader(),
                             30, "a quorum leader")
        md = _fully_replicated(cluster)
        led = {p.partition_index for t in md.topics for p in t.partitions
               if p.leader_id == victim}
        assert led, f"broker {victim} leads no partition of {TOPIC}"
        before = len(_acked(produced))
        cluster.brokers[victim].kill(signal.SIGKILL)
        survivors = [i for i in cluster.brokers if i != victim]

        def resumed() -> bool:
            after = _acked(produced)[before:]
            return led <= {o["ok"][0] for o in after if "ok" in o}

        wait_for(resumed, 90, f"acknowledged writes to partitions {sorted(led)} after the kill")
        wait_for(lambda: all(victim not in {b.node_id for b in _metadata(cluster, s).brokers}
                             for s in survivors), 30, f"broker {victim} gone from Metadata")
        md = _metadata(cluster, survivors[0])
        assert {p.leader_id for t in md.topics for p in t.partitions} <= set(survivors)

        producer.send_signal(signal.SIGTERM)
        producer.wait(120)
        assert producer.returncode == 0, "the producer did not stop cleanly"
        outcomes = _acked(produced)
        acked = {tuple(o["ok"]): o["v"] for o in outcomes if "ok" in o}
        got, eof = consume_all(",".join(cluster.brokers[s].address for s in survivors), TOPIC,
                               PARTITIONS, group="check", timeout=120)
        assert eof == set(range(PARTITIONS))
        lost = [k for k, v in acked.items() if got.get(k) != v.encode()]
        assert not lost, f"{len(lost)} acknowledged messages not read back: {lost[:5]}"

        # A normal stop of the survivors, the controller last.
        controller = _metadata(cluster, survivors[0]).controller_id
        for i in sorted(survivors, key=lambda i: i == controller):
            cluster.brokers[i].stop()
        for i in survivors:
            log = cluster.brokers[i].log_text()
            critical = [line for line in log.splitlines() if "#critical]" in line]
            assert not critical, f"broker {i} logged: {critical[:3]}"
            assert f"broker {i} stopped cleanly" in log
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait()
        cluster.stop()
