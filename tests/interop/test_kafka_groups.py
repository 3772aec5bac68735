"""Standard Kafka consumer groups (Kafka's classic group protocol) against three Sluice broker
processes, in both metadata modes: groups of three confluent-kafka, of three kafka-python and of
three aiokafka consumers (``subscribe()``) share a 12-partition topic (the aiokafka group's
messages written by an aiokafka producer), consume it completely and commit; members that close
leave with LeaveGroup, and a consumer started later in the same group resumes from the committed
offsets. With each client library, a member running in a process of its own is killed with
``kill -9``: the coordinator expires it after its session timeout and the two others take its
partitions. The broker hosting the coordinator is killed with ``kill -9``: the group rejoins at
the newly elected coordinator and goes on from its committed offsets, nothing skipped. A static
member (KIP-345) restarted quickly gets its partitions back without the others rebalancing;
cooperative-sticky members (KIP-429) give up only the partitions that move."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable

import pytest

from tests.support.cli_runs import eventually
from tests.support.cluster import ROOT
from tests.support.kafka_group_member import CLIENTS, run_member
from tests.support.procs import ProcessCluster

pytestmark = [pytest.mark.interop, pytest.mark.slow]

PARTITIONS = 12
PER_PARTITION = 50
#: Generous bound for a condition a group reaches in a few seconds; reaching it ends the wait.
DEADLINE_S = 120.0

#: The shortest session timeout the brokers accept: a killed member expires this long after
#: its last heartbeat.
MIN_SESSION_MS = 3000
BROKER_KEYS = {
    # A starting group waits this long for the rest of its members (KIP-134).
    "group.initial.rebalance.delay.ms": "500",
    "group.min.session.timeout.ms": str(MIN_SESSION_MS),
}


@pytest.fixture(scope="module", params=["zookeeper", "quorum"])
def cluster(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts,
                       tmp_path_factory.mktemp(f"groups-{request.param}"), size=3,
                       quorum=quorum, extra=BROKER_KEYS)
    c.start()
    try:
        c.wait_registered(timeout=60)
        yield c
    finally:
        c.stop()


def create_topic(cluster) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)],
                        request_timeout=30)[name].result(timeout=30)

    def led() -> bool:
        t = admin.list_topics(name, timeout=10).topics.get(name)
        return (t is not None and t.error is None and len(t.partitions) == PARTITIONS
                and all(p.leader >= 0 for p in t.partitions.values()))
    eventually(led, DEADLINE_S, f"leaders for {name}")
    failures: list[str] = []
    try:
        eventually(lambda: served_by_leaders(cluster, name, failures),
                   DEADLINE_S, f"every leader of {name} serving it")
    except AssertionError as e:
        raise AssertionError(f"{e}; last failure: {failures[-1:]}; each broker's view: "
                             f"{metadata_views(cluster, name)}") from None
    return name


def served_by_leaders(cluster, topic: str, failures: list[str]) -> bool:
    """Whether each partition's leader answers for it (ListOffsets), not only the metadata
    names one: a broker restarted by an earlier test may still be applying its LeaderAndIsr.
    Why it does not is appended to ``failures``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe",
                      "enable.auto.commit": False})
    try:
        for p in range(PARTITIONS):
            try:
                probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            except KafkaException as e:
                failures.append(f"partition {p}: {e.args[0]}")
                return False
        return True
    finally:
        probe.close()


def metadata_views(cluster, topic: str) -> dict[int, object]:
    """Each running broker's answer to Metadata for ``topic``: {broker: {partition: (leader,
    leader epoch)}} or the topic's error code, for a failure's message."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    views: dict[int, object] = {}
    for i, b in cluster.brokers.items():
        if b.proc is None or b.proc.poll() is not None:
            continue
        try:
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                md = c.request(ApiKey.METADATA, {"topics": [{"name": topic}],
                                                 "allow_auto_topic_creation": False})
        except OSError as e:
            views[i] = repr(e)
            continue
        views[i] = {t.name: t.error_code or {p.partition_index: (p.leader_id, p.leader_epoch)
                                             for p in t.partitions} for t in md.topics}
    return views


def produce(cluster, topic: str, round_: int, client: str = "confluent"
            ) -> set[tuple[int, bytes]]:
    """PER_PARTITION messages into every partition; returns {(partition, value)}. With
    ``client`` "aiokafka" an aiokafka producer (acks=all, idempotent) writes them."""
    if client == "aiokafka":
        return asyncio.run(aio_produce(cluster, topic, round_))
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    sent = set()
    errors: list = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = b"r%d-p%d-%d" % (round_, p, i)
            producer.produce(topic, value=value, partition=p,
                             on_delivery=lambda err, msg: err and errors.append(err))
            sent.add((p, value))
    assert producer.flush(30) == 0 and not errors
    return sent


async def aio_produce(cluster, topic: str, round_: int) -> set[tuple[int, bytes]]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                enable_idempotence=True)
    await producer.start()
    sent = set()
    try:
        sends = []
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                value = b"r%d-p%d-%d" % (round_, p, i)
                sends.append(await producer.send(topic, value=value, partition=p))
                sent.add((p, value))
        await asyncio.gather(*sends)  # raises if any was not delivered
    finally:
        await producer.stop()
    return sent


class Member:
    """One consumer polling in its own thread (:func:`run_member`); what it consumed,
    committed after each poll."""

    def __init__(self, client: str, cluster, topic: str, group: str,
                 conf: dict[str, object] | None = None) -> None:
        self.kind = client
        self.consumed: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.assigned: set[int] = set()
        #: ("assign" | "revoke", partitions) per rebalance callback, for confluent-kafka
        #: members (on_assign / on_revoke).
        self.events: list[tuple[str, frozenset[int]]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(
            target=self._run, args=(cluster.bootstrap, topic, group, dict(conf or {})),
            daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str, topic: str, group: str, conf: dict[str, object]) -> None:
        try:
            run_member(self.kind, bootstrap, topic, group, conf=conf, report=self._report,
                       stopped=self._stop.is_set, on_rebalance=self._record)
        except BaseException as e:  # reported by the test through .error
            self.error = e

    def _report(self, got: list[tuple[int, int, bytes]], assigned: set[int]) -> None:
        with self._lock:
            self.consumed.extend(got)
            self.assigned = assigned

    def _record(self, kind: str, partitions: frozenset[int]) -> None:
        with self._lock:
            self.events.append((kind, partitions))

    def values(self) -> set[tuple[int, bytes]]:
        with self._lock:
            return {(p, v) for p, _, v in self.consumed}

    def offsets(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(p, o) for p, o, _ in self.consumed]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), f"{self.kind} consumer did not close"
        if self.error is not None:
            raise self.error


class ProcessMember(Member):
    """A member in a process of its own (``tests.support.kafka_group_member``), so that it
    can be killed with SIGKILL; its thread reads the lines the process prints. ``close``
    kills it too: a test that wants it to leave cleanly uses a :class:`Member`."""

    def __init__(self, client: str, cluster, topic: str, group: str,
                 conf: dict[str, object] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.kafka_group_member", client,
             cluster.bootstrap, topic, group, json.dumps(conf or {})],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, text=True)
        super().__init__(client, cluster, topic, group, conf)

    def _run(self, *_: object) -> None:
        try:
            for line in self.proc.stdout:  # until the process dies
                ev = json.loads(line)
                self._report([(p, o, v.encode("ascii")) for p, o, v in ev["got"]],
                             set(ev["assigned"]))
            if (code := self.proc.wait()) != -signal.SIGKILL:
                raise RuntimeError(f"{self.kind} member process exited with {code} (its "
                                   "stderr is in the test's captured output)")
        except BaseException as e:  # reported by the test through .error
            self.error = e

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no last commit."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        self.thread.join(30)
        self.proc.stdout.close()
        assert not self.thread.is_alive(), f"{self.kind} process member's reader did not end"
        if self.error is not None:
            raise self.error


def confluent_member(cluster, topic: str, group: str, **conf: object) -> Member:
    """A confluent-kafka member; ``conf`` adds to (or overrides) its configuration. Its
    rebalance callbacks are recorded in ``events``."""
    return Member("confluent", cluster, topic, group, conf)


def union(members: list[Member]) -> set[tuple[int, bytes]]:
    out: set[tuple[int, bytes]] = set()
    for m in members:
        out |= m.values()
    return out


def sharing(members: list[Member]) -> Callable[[], bool]:
    """Whether every member has partitions and together they hold each of the 12 once."""
    def done() -> bool:
        with_parts = [m.assigned for m in members]
        return all(with_parts) and sorted(p for a in with_parts for p in a) == list(
            range(PARTITIONS))
    return done


def committed(cluster, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets, read with confluent-kafka's OffsetFetch."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps}


def check_admin_view(cluster, group: str) -> None:
    """A Kafka admin client lists the group and describes its three members and their
    partitions (ListGroups to every broker; FindCoordinator + DescribeGroups)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    assert group in {g.group_id for g in listed.valid} and not listed.errors
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    assert desc.state == ConsumerGroupState.STABLE and len(desc.members) == 3
    assert sorted(tp.partition for m in desc.members
                  for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_group_of_three_consumes_everything_commits_and_a_restart_resumes(cluster, client):
    topic = create_topic(cluster)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = produce(cluster, topic, 1, client)
    members = [Member(client, cluster, topic, group) for _ in range(3)]
    try:
        eventually(lambda: union(members) >= first,
                   DEADLINE_S, "the group to consume the whole topic")
        # Every member took part: the partitions were split three ways.
        eventually(lambda: all(m.assigned for m in members)
                   and sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS)),
                   DEADLINE_S, "three members sharing the 12 partitions")
        eventually(lambda: committed(cluster, topic, group)
                   == dict.fromkeys(range(PARTITIONS), PER_PARTITION),
                   DEADLINE_S, "every offset committed")
        check_admin_view(cluster, group)
    finally:
        for m in members:
            m.close()
    # Closing, they left with LeaveGroup; none had to be expired.
    logs = "".join(b.log_text() for b in cluster.brokers.values())
    assert re.search(rf"classic group {group}: member \S+ left", logs)
    assert not re.search(rf"classic group {group}: member \S+ expired", logs)
    second = produce(cluster, topic, 2, client)
    late = Member(client, cluster, topic, group)
    try:
        eventually(lambda: late.values() >= second,
                   DEADLINE_S, "the restarted member to consume round 2")
    finally:
        late.close()
    # It resumed from the committed offsets: nothing of round 1 was read again.
    assert all(o >= PER_PARTITION for _, o in late.offsets())
    assert not late.values() & first


@pytest.mark.parametrize("client", CLIENTS)
def test_a_member_killed_with_sigkill_expires_and_the_others_take_its_partitions(cluster, client):
    """Of three members, one runs in a process of its own and is killed with SIGKILL: it sends
    no LeaveGroup, so only its session timeout (the broker's minimum) can end its membership.
    The coordinator expires it and the two others share every partition, each once, and read
    everything produced afterwards."""
    topic = create_topic(cluster)
    group = f"g-{uuid.uuid4().hex[:8]}"
    doomed = ProcessMember(client, cluster, topic, group,
                           {"client.id": "doomed", "session.timeout.ms": MIN_SESSION_MS})
    members = [Member(client, cluster, topic, group) for _ in range(2)]
    try:
        eventually(sharing([*members, doomed]), DEADLINE_S,
                   "three members sharing the 12 partitions")
        doomed.kill()
        eventually(sharing(members), DEADLINE_S, "the two others to take every partition")
        # The session timeout, not a LeaveGroup, moved the partitions (Kafka member ids begin
        # with the client id).
        logs = "".join(b.log_text() for b in cluster.brokers.values())
        assert re.search(rf"classic group {group}: member doomed-\S+ expired", logs)
        assert not re.search(rf"classic group {group}: member \S+ left", logs)
        sent = produce(cluster, topic, 1, client)
        eventually(lambda: union(members) >= sent,
                   DEADLINE_S, "the two members to consume everything")
    finally:
        doomed.close()
        for m in members:
            m.close()


def coordinator_of(cluster, group: str) -> int:
    """The broker FindCoordinator names for ``group`` (asked of any live broker)."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    for b in cluster.brokers.values():
        if b.proc is None or b.proc.poll() is not None:
            continue
        with BrokerConnection("127.0.0.1", b.port, timeout=10) as c:
            resp = c.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0},
                             version=3)
        if resp.error_code == 0:
            return resp.node_id
    return -1


def test_the_coordinators_broker_killed_with_sigkill_the_group_resumes_from_its_offsets(cluster):
    """The coordinator's broker is killed with SIGKILL (it hands nothing over, closes no
    connection and, in ZooKeeper mode, stays registered until its session expires: a harder
    case than a clean stop, which this test replaced). The members find the newly elected
    coordinator, rejoin (their old member ids are unknown there) and go on from the offsets
    committed before: nothing of the committed round is read again and nothing produced
    afterwards is skipped (replication factor 3, so every partition stays readable). The
    killed broker is started again and registered before the test ends."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)],
                        request_timeout=30)[topic].result(timeout=30)
    eventually(lambda: (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
               and len(t.partitions) == PARTITIONS
               and all(len(p.isrs) == 3 for p in t.partitions.values()),
               DEADLINE_S, "a replicated topic")
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = produce(cluster, topic, 1)
    members = [confluent_member(cluster, topic, group) for _ in range(2)]
    old = coordinator_of(cluster, group)
    assert old > 0
    try:
        eventually(lambda: union(members) >= first, DEADLINE_S, "the group to consume round 1")
        eventually(lambda: committed(cluster, topic, group)
                   == dict.fromkeys(range(PARTITIONS), PER_PARTITION),
                   DEADLINE_S, "round 1 committed")
        for m in members:
            with m._lock:
                m.consumed.clear()
        cluster.brokers[old].kill(signal.SIGKILL)
        eventually(lambda: coordinator_of(cluster, group) not in (-1, old),
                   DEADLINE_S, "another coordinator elected")
        second = produce(cluster, topic, 2)
        eventually(lambda: union(members) >= second, DEADLINE_S, "the group to consume round 2")
        # Nothing of round 1 was read again: the new coordinator served the old offsets.
        assert not union(members) & first
    finally:
        for m in members:
            m.close()
        cluster.restart(old)


def generations_formed(cluster, group: str) -> int:
    """How many generations of ``group`` the coordinators' logs show formed."""
    logs = "".join(b.log_text() for b in cluster.brokers.values())
    return len(re.findall(rf"classic group {group} generation \d+:", logs))


def events_of(member: Member) -> list[tuple[str, frozenset[int]]]:
    with member._lock:
        return list(member.events)


def test_a_static_member_restarted_quickly_gets_its_partitions_back_without_a_rebalance(
        cluster):
    """KIP-345: three consumers with ``group.instance.id``; one closes (a static member sends
    no LeaveGroup) and a new process with the same instance id starts: it gets the same
    partitions, and the other two see no rebalance (no revoke or assign callback)."""
    topic = create_topic(cluster)
    group = f"g-{uuid.uuid4().hex[:8]}"
    static = {"session.timeout.ms": 30000}
    members = [confluent_member(cluster, topic, group, **static, **{"group.instance.id": f"i{n}"})
               for n in range(3)]
    try:
        eventually(sharing(members), DEADLINE_S, "three static members sharing the 12 partitions")
        restarted = members.pop()
        others_before = [events_of(m) for m in members]
        generations = generations_formed(cluster, group)
        partitions = set(restarted.assigned)
        restarted.close()
        members.append(confluent_member(cluster, topic, group, **static,
                                        **{"group.instance.id": "i2"}))
        eventually(lambda: members[-1].assigned == partitions,
                   DEADLINE_S, "the restarted instance to get its partitions back")
        sent = produce(cluster, topic, 1)
        eventually(lambda: union(members) >= sent, DEADLINE_S, "the group to consume everything")
        assert [events_of(m) for m in members[:2]] == others_before
        logs = "".join(b.log_text() for b in cluster.brokers.values())
        assert re.search(rf"classic group {group}: static member i2 joined again", logs)
        assert generations_formed(cluster, group) == generations
    finally:
        for m in members:
            m.close()


def test_cooperative_sticky_members_rebalance_incrementally(cluster):
    """KIP-429 as the clients drive it: two confluent-kafka members with the cooperative-sticky
    assignor share the topic; a third joins. Each of the first two has only the partitions
    that move to the newcomer revoked (incremental callbacks), and keeps the rest throughout."""
    topic = create_topic(cluster)
    group = f"g-{uuid.uuid4().hex[:8]}"
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [confluent_member(cluster, topic, group, **coop) for _ in range(2)]
    try:
        eventually(sharing(members), DEADLINE_S, "two members sharing the 12 partitions")
        before = [set(m.assigned) for m in members]
        members.append(confluent_member(cluster, topic, group, **coop))
        eventually(lambda: sharing(members)() and len(members[2].assigned) == 4,
                   DEADLINE_S, "three members sharing the 12 partitions")
        for member, held in zip(members[:2], before, strict=True):
            revoked = {p for kind, ps in events_of(member) if kind == "revoke" for p in ps}
            # Only what moved was revoked; what stayed was never taken away.
            assert revoked == held - member.assigned
            assert revoked <= members[2].assigned
            assert member.assigned <= held
        sent = produce(cluster, topic, 1)
        eventually(lambda: union(members) >= sent, DEADLINE_S, "the group to consume everything")
        check_admin_view(cluster, group)
    finally:
        for m in members:
            m.close()
