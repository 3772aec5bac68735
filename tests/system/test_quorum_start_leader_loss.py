"""A broker restarted after ``kill -9`` outlives the loss of the quorum leader it waits on.

Three broker processes in quorum mode (every one a voter). A broker whose quorum node does not
lead is killed with SIGKILL and started again: it must wait out its previous registration
(``/brokers/ids/N``, held by a session only the quorum leader can expire). While it waits, the
quorum leader's broker hangs (SIGSTOP) with one of the restarting broker's registration
attempts in flight, so that write's answer is lost (it may or may not commit): the case that
used to end the start with ``broker N failed to start: no answer from quorum leader ...``.
Once the restarting broker logs the retry (the old code: ``failed to start``), the hung leader
is killed (SIGKILL); two voters of three remain, the restarted one among them. Checked:

- the restarted broker retries through the leader change, ends registered and serves: a
  topic created through it, a produce (acks=all) and a consume through it;
- its log has no ``failed to start`` and no critical line.
"""

from __future__ import annotations

import signal

import pytest

from broker_core.wire.apis import ApiKey
from consumer_client.connection import BrokerConnection
from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all

pytestmark = pytest.mark.slow

TOPIC = "after-the-leader-change"
RETRIED = "did not get through the metadata quorum"


def _brokers_seen_by(cluster: ProcessCluster, broker: int) -> set[int]:
    with BrokerConnection("127.0.0.1", cluster.brokers[broker].port, timeout=5) as c:
        md = c.request(ApiKey.METADATA, {"topics": []})
    return {b.node_id for b in md.brokers}


def _create_topic(bootstrap: str) -> bool:
    from broker_core.wire.errors import ErrorCode
    from sluice_tools.admin import AdminClient, AdminError

    try:
        AdminClient(bootstrap_servers=bootstrap).create_topic(TOPIC, 1, 2)
    except AdminError as e:  # a retry after a first attempt whose answer was lost
        return e.code == ErrorCode.TOPIC_ALREADY_EXISTS
    except OSError:
        return False
    return True


def _produce(bootstrap: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    failed: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 30000})
    for v in values:
        producer.produce(TOPIC, v, partition=0,
                         on_delivery=lambda err, msg: err is not None and failed.append(err))
    assert producer.flush(40) == 0, "messages still queued"
    assert not failed, failed


def test_a_restarting_broker_rides_out_the_loss_of_the_quorum_leader(tmp_path):
    # A session timeout long enough that the old registration outlives the leader's loss.
    cluster = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True,
                             extra={"zookeeper.session.timeout.ms": "10000"})
    try:
        cluster.start()
        cluster.wait_registered(timeout=30)
        _, leader = wait_for(lambda: cluster.quorum_leader()[1] > 0 and cluster.quorum_leader(),
                             30, "a quorum leader")
        restarted = min(i for i in cluster.brokers if i != leader)
        broker = cluster.brokers[restarted]
        broker.kill(signal.SIGKILL)
        before = len(broker.log_text())
        broker.start()

        def since_restart() -> str:
            return broker.log_text()[before:]

        wait_for(lambda: "still held by a previous session" in since_restart(), 30,
                 f"broker {restarted} waiting out its previous registration")
        # The leader hangs: the restarting broker's next attempt (within a second) is sent to
        # it and its answer never comes; the other two voters elect a new leader meanwhile.
        cluster.brokers[leader].kill(signal.SIGSTOP)
        registered = f"registered /brokers/ids/{restarted}"
        # (Registered at once only if the hung leader had committed that attempt just as it
        # stopped: then nothing was lost, and nothing is left to check but the rest.)
        wait_for(lambda: any(line in since_restart()
                             for line in (RETRIED, "failed to start", registered)),
                 30, f"broker {restarted}'s write to the hung leader to fail")
        cluster.brokers[leader].kill(signal.SIGKILL)

        wait_for(lambda: registered in since_restart() or "failed to start" in since_restart(),
                 30, f"broker {restarted} registered again")
        log = since_restart()
        assert "failed to start" not in log, broker.log_tail()
        survivors = [i for i in cluster.brokers if i != leader]
        # The dead leader's broker leaves the metadata (its session expires), so the new
        # topic's two replicas are the two live brokers.
        wait_for(lambda: all(_brokers_seen_by(cluster, i) == set(survivors) for i in survivors),
                 30, f"brokers {survivors} and only they registered")
        wait_for(lambda: _create_topic(broker.address), 30, f"{TOPIC} created through "
                 f"broker {restarted}")
        values = [f"m{i}".encode() for i in range(20)]
        wait_for(lambda: _produce(broker.address, values) or True, 30, "the produce")
        got, eof = consume_all(broker.address, TOPIC, 1, group="check", timeout=30)
        assert eof == {0}
        assert [got[k] for k in sorted(got)][-len(values):] == values
        critical = [line for line in log.splitlines() if "#critical]" in line]
        assert not critical, critical[:3]
    finally:
        cluster.stop()
