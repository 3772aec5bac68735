"""Deleting Kafka consumer groups and their offsets with standard admin clients against three
Sluice broker processes, in both metadata modes: confluent-kafka's AdminClient lists,
describes and deletes a group (refused while it has a member, GROUP_ID_NOT_FOUND once gone);
kafka-python's KafkaAdminClient commits a memberless group's offsets, deletes the offsets of a
topic the group does not consume (refused for the one it does) and deletes the group;
``sluice groups`` shows, resets and deletes a confluent-kafka consumer's group; the metadata
and leader epoch committed with an offset come back to both clients (and librdkafka resumes
from them, validating the epoch); and the authorized operations of a group, the cluster and a
topic, asked through confluent-kafka's AdminClient, are every one Kafka reports (the cluster
runs without an authorizer)."""

from __future__ import annotations

import uuid

import pytest

from tests.support.cli_runs import eventually
from tests.support.procs import ProcessCluster

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: Generous bound for a condition reached in a few seconds; reaching it ends the wait.
DEADLINE_S = 120.0

BROKER_KEYS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "3000",
}


@pytest.fixture(scope="module", params=["zookeeper", "quorum"])
def cluster(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts,
                       tmp_path_factory.mktemp(f"group-admin-{request.param}"), size=3,
                       quorum=quorum, extra=BROKER_KEYS)
    c.start()
    try:
        c.wait_registered(timeout=60)
        yield c
    finally:
        c.stop()


def create_topics(cluster, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=2, replication_factor=1)
                                   for n in names], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)

    def led() -> bool:
        topics = admin.list_topics(timeout=10).topics
        return all(n in topics and topics[n].error is None and len(topics[n].partitions) == 2
                   and all(p.leader >= 0 for p in topics[n].partitions.values())
                   for n in names)
    eventually(led, DEADLINE_S, f"leaders for {names}")


def produce(cluster, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def listed(admin, group: str):
    result = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    return next((g for g in result.valid if g.group_id == group), None)


def test_confluent_admin_lists_describes_and_deletes_a_group(cluster):
    from confluent_kafka import (
        Consumer,
        ConsumerGroupState,
        KafkaError,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    topic, group = f"ga-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, topic)
    produce(cluster, topic, 4)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        got: list = []

        def consumed_4() -> bool:
            got.extend(m for m in consumer.consume(num_messages=10, timeout=0.2)
                       if m.error() is None)
            return len(got) >= 4
        eventually(consumed_4, DEADLINE_S, "consuming")
        consumer.commit(asynchronous=False)
        # A group with a member is not deleted.
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert listed(admin, group).state == ConsumerGroupState.STABLE
    finally:
        consumer.close()  # LeaveGroup: the group is Empty at once
    assert listed(admin, group).state == ConsumerGroupState.EMPTY
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    assert desc.state == ConsumerGroupState.EMPTY and desc.members == []

    admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    assert listed(admin, group) is None
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        tps = probe.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=30)
    finally:
        probe.close()
    assert [tp.offset for tp in tps] == [-1001, -1001]  # nothing committed any more
    with pytest.raises(KafkaException) as gone:
        admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_kafka_python_admin_deletes_offsets_and_groups(cluster):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import GroupSubscribedToTopicError, NoError
    from kafka.structs import OffsetAndMetadata

    consumed, other = f"gc-{uuid.uuid4().hex[:8]}", f"go-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, consumed, other)
    produce(cluster, consumed, 2)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        tps = [TopicPartition(consumed, 0), TopicPartition(other, 0)]
        # No member yet: a generation -1 commit, as Kafka's tools make.
        result = admin.alter_group_offsets(group, {
            tp: OffsetAndMetadata(1, "", None) for tp in tps})
        assert set(result.values()) == {NoError}
        member = KafkaConsumer(consumed, bootstrap_servers=cluster.bootstrap.split(","),
                               group_id=group, enable_auto_commit=False,
                               session_timeout_ms=6000, heartbeat_interval_ms=500)
        try:
            def joined() -> set:
                member.poll(timeout_ms=200)
                return member.assignment()
            eventually(joined, DEADLINE_S, "joining")
            result = admin.delete_group_offsets(group, tps)
            assert result == {tps[0]: GroupSubscribedToTopicError, tps[1]: NoError}
            assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        finally:
            member.close()
        offsets = admin.list_group_offsets(group)[group]
        assert {tp: o.offset for tp, o in offsets.items()} == {tps[0]: 1}
        assert admin.delete_groups([group]) == {group: "OK"}
        assert admin.list_group_offsets(group) == {group: {}}
    finally:
        admin.close()


def sluice(*argv: str) -> tuple[int, str, str]:
    """``sluice ARGV`` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from sluice_tools import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_sluice_groups_shows_resets_and_deletes_a_kafka_group(cluster):
    """A confluent-kafka consumer's group in ``sluice groups``: listed as kafka, described
    with its member, client id and the partitions decoded from its assignment, committed
    offsets and lag; reset refused while it has the member, then (dry run, then written)
    once it left; then deleted."""
    from confluent_kafka import Consumer, TopicPartition

    topic, group = f"gs-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, topic)
    produce(cluster, topic, 6)  # 3 per partition
    b = cluster.bootstrap
    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "client.id": "cli-app",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        got: list = []

        def consumed_6() -> bool:
            got.extend(m for m in consumer.consume(num_messages=10, timeout=0.2)
                       if m.error() is None)
            return len(got) >= 6
        eventually(consumed_6, DEADLINE_S, "consuming")
        # Partition 0 fully committed, partition 1 one message short: lag 0 and 1.
        consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 2)],
                        asynchronous=False)
        code, out, _ = sluice("groups", "list", "--bootstrap-server", b)
        assert code == 0 and [group, "kafka", "Stable", "1"] in [
            line.split() for line in out.splitlines()]
        code, out, err = sluice("groups", "describe", "--bootstrap-server", b, "--group", group)
        assert code == 0, err
        assert f"Group: {group}\tKind: kafka\tState: Stable\tProtocol: consumer/" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith(topic)]
        assert [r[:5] for r in rows] == [[topic, "0", "3", "3", "0"], [topic, "1", "2", "3", "1"]]
        assert all(r[5].startswith("cli-app") and r[7] == "cli-app" for r in rows)
        assert f"partitions {topic}-0,{topic}-1" in out
        code, _, err = sluice("groups", "reset-offsets", "--bootstrap-server", b, "--group",
                              group, "--topic", topic, "--to-earliest", "--execute")
        assert code == 1 and "(kafka) has 1 active member" in err
    finally:
        consumer.close()
    code, out, _ = sluice("groups", "reset-offsets", "--bootstrap-server", b, "--group", group,
                          "--topic", f"{topic}:0", "--to-offset", "1")
    assert code == 0 and [group, topic, "0", "3", "1"] in [line.split() for line in
                                                           out.splitlines()]
    assert "Dry run" in out
    code, out, err = sluice("groups", "reset-offsets", "--bootstrap-server", b, "--group",
                            group, "--topic", topic, "--to-earliest", "--execute")
    assert code == 0, err
    code, out, _ = sluice("groups", "describe", "--bootstrap-server", b, "--group", group)
    rows = [line.split("\t")[:5] for line in out.splitlines() if line.startswith(topic)]
    assert rows == [[topic, "0", "0", "3", "3"], [topic, "1", "0", "3", "3"]]
    assert "State: Empty" in out
    code, out, _ = sluice("groups", "delete", "--bootstrap-server", b, "--group", group)
    assert (code, out) == (0, f"Deleted group {group}\n")
    code, _, err = sluice("groups", "describe", "--bootstrap-server", b, "--group", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err


def test_confluent_commit_metadata_and_leader_epoch_round_trip(cluster):
    """librdkafka commits the leader epoch of what it consumed with the offset; a new member
    resumes from it (validating the epoch with OffsetForLeaderEpoch) and the metadata an
    application stored is returned by ``committed()``."""
    from confluent_kafka import Consumer, TopicPartition

    topic, group = f"gm-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, topic)
    produce(cluster, topic, 4)  # 2 per partition

    def consumer():
        return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})

    first = consumer()
    try:
        first.subscribe([topic])
        got: list = []

        def consumed(n: int) -> bool:
            got.extend(m for m in first.consume(num_messages=10, timeout=0.2)
                       if m.error() is None)
            return len(got) >= n
        eventually(lambda: consumed(4), DEADLINE_S, "consuming")
        epochs = {m.partition(): m.leader_epoch() for m in got}
        assert all(e is not None and e >= 0 for e in epochs.values()), epochs
        # Partition 0 fully consumed, partition 1 one message short.
        first.commit(offsets=[
            TopicPartition(topic, 0, 2, metadata="state-0", leader_epoch=epochs[0]),
            TopicPartition(topic, 1, 1, metadata="{\"k\": \"\u00e9\"}",
                           leader_epoch=epochs[1])], asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=30)
        assert [(tp.offset, tp.metadata, tp.leader_epoch) for tp in committed] == [
            (2, "state-0", epochs[0]), (1, '{"k": "\u00e9"}', epochs[1])]
    finally:
        first.close()
    second = consumer()
    try:
        second.subscribe([topic])
        resumed: list = []

        def one() -> bool:
            resumed.extend(m for m in second.consume(num_messages=10, timeout=0.2)
                           if m.error() is None)
            return bool(resumed)
        eventually(one, DEADLINE_S, "resuming from the committed offsets")
        assert (resumed[0].partition(), resumed[0].offset()) == (1, 1)
        # Committing the same offset with new metadata replaces it.
        second.commit(offsets=[TopicPartition(topic, 0, 2, metadata="state-0b",
                                              leader_epoch=epochs[0])], asynchronous=False)
        (tp,) = second.committed([TopicPartition(topic, 0)], timeout=30)
        assert (tp.offset, tp.metadata, tp.leader_epoch) == (2, "state-0b", epochs[0])
    finally:
        second.close()


def test_kafka_python_offset_metadata_round_trip(cluster):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    topic, group = f"gk-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, topic)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        result = admin.alter_group_offsets(group, {
            tp0: OffsetAndMetadata(3, "checkpoint-3", 0), tp1: OffsetAndMetadata(1, "", None)})
        assert set(result.values()) == {NoError}
        offsets = admin.list_group_offsets(group)[group]
        assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
            tp0: (3, "checkpoint-3"), tp1: (1, "")}
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap.split(","), group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({tp1: OffsetAndMetadata(0, "from-consumer", -1)})
        got = consumer.committed(tp1, metadata=True)
        assert (got.offset, got.metadata) == (0, "from-consumer")
        assert consumer.committed(tp0, metadata=True).metadata == "checkpoint-3"
    finally:
        consumer.close()


def test_confluent_admin_reports_authorized_operations(cluster):
    """Without an authorizer every operation Kafka reports for the resource type."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    topic, group = f"gp-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topics(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    desc = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                          request_timeout=30)[group].result(timeout=60)
    assert set(desc.authorized_operations) == {
        AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}
    described = admin.describe_cluster(include_authorized_operations=True,
                                       request_timeout=30).result(timeout=60)
    assert set(described.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
    (future,) = admin.describe_topics(TopicCollection([topic]),
                                      include_authorized_operations=True,
                                      request_timeout=30).values()
    assert set(future.result(timeout=60).authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
    # Not asked: none reported.
    plain = admin.describe_cluster(request_timeout=30).result(timeout=60)
    assert not plain.authorized_operations
