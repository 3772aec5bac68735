"""Kafka's own admin clients drive Sluice's cluster administration APIs on the wire, against
three broker processes in each metadata mode (ZooKeeper and the quorum): DescribeCluster,
DescribeLogDirs, DeleteRecords, ElectLeaders and Alter/ListPartitionReassignments, through
confluent-kafka's ``AdminClient`` (which has no reassignment calls) and kafka-python's
``KafkaAdminClient``, with their refusals."""

from __future__ import annotations

import uuid

import pytest

from broker_core.wire.apis import ApiKey
from tests.support.cli_runs import eventually
from tests.support.procs import ProcessCluster


@pytest.fixture(scope="module", params=["zookeeper", "quorum"])
def admin_cluster(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts,
                       tmp_path_factory.mktemp(f"admin-{request.param}"), size=3, quorum=quorum)
    c.start()
    try:
        c.wait_registered()
        yield c
    finally:
        c.stop()


@pytest.fixture
def kp_admin(admin_cluster):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=admin_cluster.bootstrap, request_timeout_ms=30000)
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def ck_admin(admin_cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": admin_cluster.bootstrap})


def new_topic(admin_cluster, ck_admin, assignment: list[list[int]]) -> str:
    """A fresh topic with the given replicas per partition; waits for every leader."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    resp = _request(admin_cluster, ApiKey.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
         "assignments": [{"partition_index": i, "broker_ids": r}
                         for i, r in enumerate(assignment)]}],
        "timeout_ms": 30000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp
    eventually(lambda: all(p.leader >= 0 for p in partitions(ck_admin, name).values())
               and len(partitions(ck_admin, name)) == len(assignment), 60.0, f"leaders of {name}")
    return name


def partitions(ck_admin, topic: str) -> dict:
    md = ck_admin.list_topics(topic, timeout=30)
    t = md.topics.get(topic)
    return {} if t is None or t.error is not None else t.partitions


def produce(admin_cluster, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": admin_cluster.bootstrap, "acks": "all"})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def test_describe_cluster(admin_cluster, ck_admin, kp_admin):
    found = ck_admin.describe_cluster(request_timeout=30).result(timeout=30)
    assert sorted(n.id for n in found.nodes) == [1, 2, 3]
    assert found.controller is not None and found.controller.id in (1, 2, 3)
    assert found.cluster_id
    ports = {n.id: n.port for n in found.nodes}
    assert ports == {i: b.port for i, b in admin_cluster.brokers.items()}

    answer = kp_admin.describe_cluster()
    assert sorted(b["broker_id"] for b in answer["brokers"]) == [1, 2, 3]
    assert answer["cluster_id"] == found.cluster_id
    assert answer["controller_id"] == found.controller.id


def test_reassignment_moves_a_partition_and_refuses_bad_targets(admin_cluster, ck_admin,
                                                                 kp_admin):
    from kafka import TopicPartition
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    topic = new_topic(admin_cluster, ck_admin, [[1]])
    produce(admin_cluster, topic, 5)
    tp = TopicPartition(topic, 0)
    assert kp_admin.alter_partition_reassignments({tp: [2, 3]}) == {tp: None}
    eventually(lambda: sorted(partitions(ck_admin, topic)[0].replicas) == [2, 3]
               and sorted(partitions(ck_admin, topic)[0].isrs) == [2, 3],
               60.0, "the partition on brokers 2 and 3")
    eventually(lambda: kp_admin.list_partition_reassignments() == {}, 60.0, "the reassignment done")

    # Refusals, per partition as Kafka gives them; none of them changes anything.
    gone = TopicPartition(topic, 7)
    nowhere = TopicPartition("no-such-topic", 0)
    answer = kp_admin.alter_partition_reassignments({
        gone: [1], nowhere: [1], tp: [2, 9]})
    assert answer == {gone: UnknownTopicOrPartitionError, nowhere: UnknownTopicOrPartitionError,
                      tp: InvalidReplicationAssignmentError}
    assert kp_admin.alter_partition_reassignments({tp: [2, 2]}) == {
        tp: InvalidReplicationAssignmentError}
    # kafka-python refuses an empty list itself; on the wire it is INVALID_REPLICA_ASSIGNMENT.
    resp = _request(admin_cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": []}]}]})
    assert [p.error_code for p in resp.responses[0].partitions] == [39]
    assert kp_admin.alter_partition_reassignments({tp: None}) == {
        tp: NoReassignmentInProgressError}
    assert kp_admin.list_partition_reassignments() == {}
    assert sorted(partitions(ck_admin, topic)[0].replicas) == [2, 3]
    # The records moved with the partition.
    low, high = _watermarks(admin_cluster, topic)
    assert (low, high) == (0, 5)


def _request(admin_cluster, api: int, body: dict, broker: int = 1):
    """One request to ``broker`` over Sluice's blocking client connection."""
    from consumer_client.connection import BrokerConnection

    with BrokerConnection("127.0.0.1", admin_cluster.brokers[broker].port, timeout=30) as c:
        return c.request(api, body)


def _watermarks(admin_cluster, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": admin_cluster.bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        c.close()


def test_preferred_election_after_reordering_the_replicas(admin_cluster, ck_admin, kp_admin):
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CkTopicPartition
    from kafka import TopicPartition

    topic = new_topic(admin_cluster, ck_admin, [[1, 2]])
    produce(admin_cluster, topic, 3)
    eventually(lambda: sorted(partitions(ck_admin, topic)[0].isrs) == [1, 2],
               60.0, "both in the ISR")
    assert partitions(ck_admin, topic)[0].leader == 1
    # The same replicas in another order: broker 2 becomes the preferred leader, while 1 leads.
    tp = TopicPartition(topic, 0)
    assert kp_admin.alter_partition_reassignments({tp: [2, 1]}) == {tp: None}
    eventually(lambda: partitions(ck_admin, topic)[0].replicas == [2, 1], 60.0, "the new order")
    assert partitions(ck_admin, topic)[0].leader == 1

    ck_tp = CkTopicPartition(topic, 0)
    # No timeout keywords: confluent-kafka 2.16's elect_leaders fails on any (a SystemError
    # from its argument parsing); its default is socket.timeout.ms.
    result = ck_admin.elect_leaders(ElectionType.PREFERRED, [ck_tp]).result(timeout=90)
    assert result == {ck_tp: None}
    eventually(lambda: partitions(ck_admin, topic)[0].leader == 2, 60.0, "broker 2 leading")
    # Again: nothing to do, which Kafka answers ELECTION_NOT_NEEDED.
    result = ck_admin.elect_leaders(ElectionType.PREFERRED, [ck_tp]).result(timeout=90)
    assert result[ck_tp] is not None and result[ck_tp].name() == "ELECTION_NOT_NEEDED"
    # kafka-python, with an unknown partition among them, and an UNCLEAN election of a
    # partition that has a leader.
    answer = kp_admin.elect_leaders(0, {topic: [0, 5]}, raise_errors=False)
    codes = {p.partition_id: p.error_code for r in answer.replica_election_results
             for p in r.partition_result}
    assert codes == {0: 84, 5: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    answer = kp_admin.elect_leaders(1, {topic: [0]}, raise_errors=False)
    assert [p.error_code for r in answer.replica_election_results
            for p in r.partition_result] == [84]


def test_delete_records_moves_the_log_start_on_every_replica(admin_cluster, ck_admin,
                                                             kp_admin):
    from confluent_kafka import TopicPartition as CkTopicPartition
    from kafka import TopicPartition

    topic = new_topic(admin_cluster, ck_admin, [[1, 2, 3]])
    produce(admin_cluster, topic, 10)
    ck_tp = CkTopicPartition(topic, 0, 4)
    deleted = ck_admin.delete_records([ck_tp], request_timeout=30)[ck_tp].result(timeout=30)
    assert deleted.low_watermark == 4
    assert _watermarks(admin_cluster, topic) == (4, 10)
    # kafka-python: up to the high watermark (-1), then past it (refused, nothing moves).
    tp = TopicPartition(topic, 0)
    answer = kp_admin.delete_records({tp: 7})
    assert answer[tp]["low_watermark"] == 7
    from kafka.errors import OffsetOutOfRangeError
    with pytest.raises(OffsetOutOfRangeError):
        kp_admin.delete_records({tp: 11})
    assert _watermarks(admin_cluster, topic) == (7, 10)

    # The followers followed: each replica's log-start-offset checkpoint (written every few
    # seconds) says 7 on every broker.
    eventually(lambda: all(_log_start(admin_cluster, b, topic) == 7 for b in (1, 2, 3)),
               60.0, "every replica's log start at 7")


def _log_start(admin_cluster, broker_id: int, topic: str) -> int:
    """A broker's checkpointed log start offset of ``topic``-0 (-1 before the first)."""
    from broker_core.log.checkpoints import read_offsets

    path = admin_cluster.brokers[broker_id].log_dir / "log-start-offset-checkpoint"
    try:
        return read_offsets(path).get((topic, 0), -1)
    except FileNotFoundError:
        return -1


def test_describe_log_dirs(admin_cluster, ck_admin, kp_admin):
    topic = new_topic(admin_cluster, ck_admin, [[1, 2, 3]])
    produce(admin_cluster, topic, 3)
    answer = kp_admin.describe_log_dirs(topic_partitions={topic: [0]})
    assert len(answer) == 3
    assert sorted(b["broker"] for b in answer) == [1, 2, 3]
    for broker in answer:
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0
        (t,) = log_dir["topics"]
        assert t["name"] == topic
        (p,) = t["partitions"]
        assert p["partition_index"] == 0 and p["partition_size"] > 0


def test_refusals_on_the_wire(admin_cluster, ck_admin):
    """What Kafka's clients do not send but a peer may: each refused, nothing changed."""
    topic = new_topic(admin_cluster, ck_admin, [[2]])
    produce(admin_cluster, topic, 3)
    # DescribeCluster for controllers: Sluice's controller is a broker.
    resp = _request(admin_cluster, ApiKey.DESCRIBE_CLUSTER,
                    {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert resp.error_code == 115 and resp.brokers == []  # UNSUPPORTED_ENDPOINT_TYPE
    # DeleteRecords to a broker that does not lead the partition, and a partition named twice.
    body = {"timeout_ms": 10000, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "offset": 1}]}]}
    resp = _request(admin_cluster, ApiKey.DELETE_RECORDS, body)
    assert resp.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
    twice = {"timeout_ms": 10000, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "offset": 1}, {"partition_index": 0, "offset": 2}]}]}
    resp = _request(admin_cluster, ApiKey.DELETE_RECORDS, twice, broker=2)
    assert [p.error_code for p in resp.topics[0].partitions] == [42, 42]
    assert [p.low_watermark for p in resp.topics[0].partitions] == [-1, -1]
    assert _watermarks(admin_cluster, topic) == (0, 3)
    # ElectLeaders of an unknown type.
    resp = _request(admin_cluster, ApiKey.ELECT_LEADERS, {
        "election_type": 9, "timeout_ms": 1000,
        "topic_partitions": [{"topic": topic, "partitions": [0]}]})
    assert resp.error_code == 42
    # The quorum's voter change is not served on a client listener: there, key 45 names topic
    # partitions, and the quorum's log is not one.
    resp = _request(admin_cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"topics": [
        {"name": "__cluster_metadata", "partitions": [{"partition_index": 0,
                                                       "replicas": [1, 2]}]}]})
    assert [p.error_code for p in resp.responses[0].partitions] == [3]
    # DescribeLogDirs of a partition this broker does not hold: the directory, no partitions.
    resp = _request(admin_cluster, ApiKey.DESCRIBE_LOG_DIRS,
                    {"topics": [{"topic": topic, "partitions": [0]}]})
    assert [(r.error_code, r.topics) for r in resp.results] == [(0, [])]
    resp = _request(admin_cluster, ApiKey.DESCRIBE_LOG_DIRS,
                    {"topics": [{"topic": topic, "partitions": [0]}]}, broker=2)
    assert [[t.name for t in r.topics] for r in resp.results] == [[topic]]


def test_describe_cluster_v2_and_reassignment_v1(admin_cluster, ck_admin, kp_admin):
    """kafka-python sends DescribeCluster v2 asking for fenced brokers: every broker is named,
    none fenced (docs/protocol.md says why). Its reassignment call sends v1 with
    ``allow_replication_factor_change`` true (its default; tested above); false, which it
    cannot send, goes on the wire here: a change of size is refused, a same-size move is
    carried out."""
    answer = kp_admin.describe_cluster()
    assert sorted((b["broker_id"], b["is_fenced"]) for b in answer["brokers"]) == [
        (1, False), (2, False), (3, False)]

    topic = new_topic(admin_cluster, ck_admin, [[1, 2], [1, 2]])
    body = {"timeout_ms": 30000, "allow_replication_factor_change": False, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": [3]},
                                       {"partition_index": 1, "replicas": [2, 3]}]}]}
    resp = _request(admin_cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, body)
    assert resp.allow_replication_factor_change is False
    found = {p.partition_index: (p.error_code, p.error_message)
             for p in resp.responses[0].partitions}
    assert found[0][0] == 38 and "replication factor" in found[0][1]  # INVALID_REPLICATION_FACTOR
    assert found[1] == (0, None)
    eventually(lambda: sorted(partitions(ck_admin, topic)[1].replicas) == [2, 3]
               and kp_admin.list_partition_reassignments() == {}, 60.0, "partition 1 moved")
    assert sorted(partitions(ck_admin, topic)[0].replicas) == [1, 2]


# ZooKeeper mode only: in the quorum cluster every broker is a voter, so with both replicas
# down one voter of three is left and no controller can record the partition as leaderless.
# The controller's and the request path's code is the same in both modes (unit-tested on the
# store interface, tests/unit/test_unclean_election.py).
@pytest.mark.parametrize("admin_cluster", ["zookeeper"], indirect=True)
def test_unclean_election_gives_a_leaderless_partition_an_out_of_sync_replica(
        admin_cluster, ck_admin, kp_admin):
    """KIP-460 on the wire: a partition whose only in-sync replica is down while a replica out
    of the ISR is alive gets that replica as leader on an UNCLEAN ElectLeaders, whatever the
    topic's ``unclean.leader.election.enable`` (false here), and takes writes again; with no
    live replica the answer is ELIGIBLE_LEADERS_NOT_AVAILABLE, with a live leader
    ELECTION_NOT_NEEDED. Runs last in the module: it stops brokers (and starts them again)."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CkTopicPartition

    controller = ck_admin.list_topics(timeout=30).controller_id
    leader, follower = [b for b in (1, 2, 3) if b != controller][:2]
    topic = new_topic(admin_cluster, ck_admin, [[leader, follower]])
    produce(admin_cluster, topic, 3)
    eventually(lambda: sorted(partitions(ck_admin, topic)[0].isrs) == sorted([leader, follower]),
               60.0, "both in the ISR")
    try:
        admin_cluster.brokers[follower].stop()
        eventually(lambda: partitions(ck_admin, topic)[0].isrs == [leader], 60.0,
                   "the stopped follower out of the ISR")
        admin_cluster.brokers[leader].stop()
        eventually(lambda: partitions(ck_admin, topic)[0].leader == -1, 60.0, "no leader")

        # Both replicas down: nobody can lead. (kafka-python gives up on a bootstrap list
        # with stopped brokers; it is asked once all are back, below.)
        ck_tp = CkTopicPartition(topic, 0)
        result = ck_admin.elect_leaders(ElectionType.UNCLEAN, [ck_tp]).result(timeout=90)
        assert result[ck_tp] is not None
        assert result[ck_tp].name() == "ELIGIBLE_LEADERS_NOT_AVAILABLE"

        # The out-of-sync follower is back; the partition stays leaderless on its own.
        start_again(admin_cluster, [follower], running=2)
        assert partitions(ck_admin, topic)[0].leader == -1
        result = ck_admin.elect_leaders(ElectionType.UNCLEAN, [ck_tp]).result(timeout=90)
        assert result == {ck_tp: None}
        eventually(lambda: partitions(ck_admin, topic)[0].leader == follower, 60.0,
                   "the out-of-sync replica leading")
        assert partitions(ck_admin, topic)[0].isrs == [follower]
        produce(admin_cluster, topic, 2)

        # It has a live leader now: confluent-kafka and kafka-python hear ELECTION_NOT_NEEDED,
        # also once the old leader is back (it follows, it does not take over).
        result = ck_admin.elect_leaders(ElectionType.UNCLEAN, [ck_tp]).result(timeout=90)
        assert result[ck_tp] is not None and result[ck_tp].name() == "ELECTION_NOT_NEEDED"
        start_again(admin_cluster, [leader], running=3)
        assert partitions(ck_admin, topic)[0].leader == follower
        answer = kp_admin.elect_leaders(1, {topic: [0, 5]}, raise_errors=False)
        codes = {p.partition_id: p.error_code for r in answer.replica_election_results
                 for p in r.partition_result}
        assert codes == {0: 84, 5: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    finally:
        start_again(admin_cluster, [leader, follower], running=3)


def start_again(cluster, ids: list[int], running: int) -> None:
    """Start those of the stopped brokers ``ids`` that are not running; return once each has
    registered again and every running broker's Metadata lists ``running`` brokers (the
    cluster's ``restart`` waits for all of them, which is wrong while others are down)."""
    started = {}
    for i in ids:
        b = cluster.brokers[i]
        if b.proc is not None and b.proc.poll() is None:
            continue
        line = f"registered /brokers/ids/{i} "
        started[i] = (line, b.log_text().count(line))
        b.start()
    for i, (line, before) in started.items():
        b = cluster.brokers[i]
        b.wait_listening()
        eventually(lambda b=b, line=line, before=before: b.log_text().count(line) > before,
                   120.0, f"broker {i} registered again")
    cluster.wait_registered(n=running, timeout=120.0)
