"""Poison metadata in quorum mode, with three broker processes (every one a voter), no
ZooKeeper.

1. A MetadataWrite whose command does not validate (a newer encoding version, deep nesting)
   sent to the quorum leader's listener, on a connection logged in as a broker (the cluster
   secret), is refused (UNSUPPORTED_VERSION / INVALID_REQUEST) and never reaches the log: no
   broker counts a skipped entry for it later. Without the login it is refused before that
   (CLUSTER_AUTHORIZATION_FAILED).
2. A poison entry that reaches the log anyway: with every broker stopped, a command of a newer
   encoding version is appended to every voter's metadata log through the Raft log layer, at
   the same offset and epoch on each (what replication of an entry a newer leader accepted
   would leave on disk), so the next leader commits it. Every broker starts, each counts the
   skipped entry once (``sluice_metadata_entries_skipped_total{reason="unsupported_version"}``),
   and the cluster works: a topic is created, written with acks=all and read back with the
   records written before.
3. Every broker is restarted once more: each starts, replays the log and skips the entry again,
   and the cluster works again.

Before the fix the write of 1 was committed, every node's committed-entries subscriber failed on
it (losing the entries delivered with it) and no broker could register again after a restart.
"""

from __future__ import annotations

import time

import pytest

from broker_core.raft.entries import LogEntry
from broker_core.raft.storage import DiskRaftLog
from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all
from tests.support.quorum_topics import try_create_topic

pytestmark = pytest.mark.slow

NEWER = b'{"v":2,"t":0,"c":"create","p":"/from-the-future","d":"","o":0,"s":false}'
SKIPPED = "sluice_metadata_entries_skipped_total"


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True, metrics=True, extra={
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50"})
    try:
        yield c
    finally:
        c.stop()


def _write(cluster: ProcessCluster, broker_id: int, command: bytes, *, as_broker: bool = True):
    """One MetadataWrite to ``broker_id``'s quorum listener, logged in with the cluster's
    secret (``as_broker``) as another broker's quorum client is; the response."""
    from broker_core.security.cluster_secret import ClusterCredential
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection
    from sluice_tools.quorum_admin import log_in
    from tests.support.cluster import cluster_secret_file

    with BrokerConnection("127.0.0.1", cluster.quorum_ports[broker_id], timeout=10) as c:
        if as_broker:
            log_in(c, ClusterCredential.from_file(cluster_secret_file(cluster.base)).login)
        return c.request(ApiKey.METADATA_WRITE, {"node_id": 99, "command": command}, version=0)


def _produce(bootstrap: str, topic: str, n: int) -> dict[tuple[int, int], bytes]:
    from confluent_kafka import Producer

    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err, msg):
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                  "enable.idempotence": False, "message.timeout.ms": 60000})
    for i in range(n):
        p.produce(topic, value=b"%s-%04d" % (topic.encode(), i), partition=i % 3,
                  on_delivery=on_delivery)
    assert p.flush(90) == 0
    assert len(acked) == n
    return acked


def _works(cluster: ProcessCluster, topic: str, earlier: dict) -> dict:
    """Create ``topic`` (3 partitions, RF 3), write 30 records with acks=all, and read them
    back, with every record of ``earlier`` (topic -> acked records) still there."""
    wait_for(lambda: try_create_topic(cluster.bootstrap, topic, 3), 90, f"topic {topic} created")
    written = {**earlier, topic: wait_for(lambda: _produce(cluster.bootstrap, topic, 30), 120,
                                          f"30 records written to {topic}")}
    for name, acked in written.items():
        got, eof = consume_all(cluster.bootstrap, name, 3, group=f"check-{topic}-{name}",
                               timeout=90)
        assert eof == {0, 1, 2}
        assert {k: got.get(k) for k in acked} == acked
    return written


def _skipped(cluster: ProcessCluster) -> dict[int, float]:
    return {i: b.metric(SKIPPED, reason="unsupported_version")
            for i, b in cluster.brokers.items()}


def _append_everywhere(cluster: ProcessCluster, payload: bytes) -> int:
    """With every broker stopped: bring the voters' metadata logs level (copying, from the
    longest, the entries a voter lacks, as replication would) and append ``payload`` at the same
    offset and epoch to each. Returns its offset."""
    logs = {i: DiskRaftLog.open(b.log_dir / "quorum", time_ms=lambda: int(time.time() * 1000))
            for i, b in cluster.brokers.items()}
    try:
        longest = max(logs.values(), key=lambda log: (log.last_epoch(), log.end_offset()))
        end, epoch = longest.end_offset(), longest.last_epoch()
        for log in logs.values():
            if log is not longest and log.end_offset() < end:
                # A prefix of the longest (every entry the others hold was committed or is
                # the same entry: same offset and epoch).
                last = log.end_offset() - 1
                assert last < 0 or log.epoch_at(last) == longest.epoch_at(last)
                log.append(longest.read(log.end_offset(), end - log.end_offset()))
            assert (log.end_offset(), log.last_epoch()) == (end, epoch)
        for log in logs.values():
            log.append([LogEntry(end, epoch, payload)])
            log.flush()
    finally:
        for log in logs.values():
            log.close()
    return end


def test_poison_metadata_is_refused_or_skipped_and_every_broker_restarts(cluster):
    cluster.start()
    cluster.wait_registered(timeout=90)
    written = _works(cluster, "before", {})

    # 1. Refused at the leader, nothing appended.
    _, leader = wait_for(lambda: cluster.quorum_leader()[1] > 0 and cluster.quorum_leader(), 60,
                         "a quorum leader")
    answer = _write(cluster, leader, NEWER, as_broker=False)
    assert (answer.error_code, answer.offset) == (31, -1), answer  # CLUSTER_AUTHORIZATION_FAILED
    answer = _write(cluster, leader, NEWER)
    assert (answer.error_code, answer.offset) == (35, -1), answer  # UNSUPPORTED_VERSION
    assert "version 2" in answer.error_message
    answer = _write(cluster, leader, b"[" * 100_000)
    assert (answer.error_code, answer.offset) == (42, -1), answer  # INVALID_REQUEST
    assert _skipped(cluster) == {1: 0.0, 2: 0.0, 3: 0.0}

    # 2. A poison entry in every voter's log.
    cluster.stop()
    offset = _append_everywhere(cluster, NEWER)
    cluster.start()
    cluster.wait_registered(timeout=90)
    wait_for(lambda: _skipped(cluster) == {1: 1.0, 2: 1.0, 3: 1.0}, 60,
             "every broker skipped the poison entry once")
    for b in cluster.brokers.values():
        text = b.log_text()
        assert f"skipped the metadata entry at offset {offset} (unsupported_version)" in text
    written = _works(cluster, "after", written)

    # 3. Every broker restarted again, over the log that holds it.
    cluster.stop()
    cluster.start()
    cluster.wait_registered(timeout=90)
    wait_for(lambda: _skipped(cluster) == {1: 1.0, 2: 1.0, 3: 1.0}, 60,
             "every broker skipped the poison entry again")
    _works(cluster, "again", written)
    assert all(b.proc.poll() is None for b in cluster.brokers.values())
