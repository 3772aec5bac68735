"""Issue 15's attacks, replayed against three real broker processes in each metadata mode
(ZooKeeper, and the quorum with every broker a voter, its quorum listener PLAINTEXT or SSL
with client certificates required), from a plain client socket (anonymous,
the default) and from a SCRAM-SHA-512 user logged in over SASL_SSL (made with ``sluice users
add`` through the cluster login). Each attack is refused with its exact error code and changes
nothing:

- StopReplica deleting the only replica of an RF-1 partition, full LeaderAndIsr requests (none
  naming a partition; one making a follower the leader at a higher epoch with ISR [itself]),
  UpdateMetadata sending every broker elsewhere, ControlledShutdown for each broker with
  ``broker_epoch=-1``, AlterPartition with 500 guessed broker epochs, BrokerHeartbeat:
  CLUSTER_AUTHORIZATION_FAILED (31); the partition's directory is there and its records read
  back, the ISRs and leaders unchanged, Metadata still gives the real addresses, the follower
  does not accept a write, acks=all with ``min.insync.replicas=2`` still works, and the brokers
  still obey their real controller (a leadership change after the leader stops applies).
- A Fetch claiming a follower's id at a huge offset, while both followers are stopped
  (SIGSTOP): 31, the high watermark does not move and an acks=all write is not acknowledged;
  once the followers run again it is.
- CommitOffsets with the member id read from DescribeConsumerGroups: UNKNOWN_MEMBER_ID (25, the
  coordinator's answer to anyone but the member on its own session), the offsets unchanged.
- Quorum mode, the quorum port: MetadataWrite (deleting a topic, expiring a session, a command
  of an unknown version), SessionHeartbeat, Vote and BeginQuorumEpoch floods, EndQuorumEpoch,
  a voter's Fetch and AlterPartitionReassignments shrinking the voters: 31 each; a user's or a
  wrong secret's login: SASL_AUTHENTICATION_FAILED (58). The topic stays, the leader, its epoch
  and the voters are unchanged (DescribeQuorum), metadata writes go on, and a killed broker's
  registration goes away while an attacker heartbeats every session id there may be. On an
  SSL quorum listener the attacker completes the TLS handshake first (with a certificate of
  the cluster's CA: TLS proves a peer, not a broker), and is refused all the same.
- Then every broker is stopped and started again: all register and every record written is
  read back.

Resource limits (idle, per-address and total connections, partial frames, slow readers) are
covered by ``tests/system/test_connection_limits.py`` and
``tests/integration/test_server_slow_peers.py``; the control plane refused in process (and a
broker with another secret) by ``tests/integration/test_control_plane_closed.py``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from broker_core.security.cluster_secret import ClusterCredential
from broker_core.security.sasl import SaslAuthenticationError
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.connection import BrokerConnection
from consumer_client.security import ClientSecurity
from tests.support.certs import CertFiles, Pki, make_pki
from tests.support.cluster import cluster_secret_file
from tests.support.consumer_group_procs import ConsumerProc, stable
from tests.support.failover_checks import wait_for
from tests.support.forged_requests import (
    Forged,
    alter_partition_shrink,
    control_requests,
    follower_fetch,
    leader_and_isr_follower_leads,
    quorum_requests,
    stop_replica_delete,
)
from tests.support.procs import ProcessCluster, consume_all
from tests.support.users import add_user

pytestmark = pytest.mark.slow

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
#: BROKER (plaintext) is the inter-broker listener and the anonymous attacker's; SASL_SSL the
#: logged-in user's.
LISTENERS = [("BROKER", "PLAINTEXT"), ("SASL_SSL", "SASL_SSL")]
USER, PASSWORD = "mallory", "mallory-has-a-real-login"
#: RF 1, its one replica on broker 2; RF 3 led by broker 1 (the first replica), the next
#: leader broker 2.
RF1, RF3 = "only-copy", "replicated"
RF1_HOLDER = 2
GROUP = "victims"
#: Another cluster's secret: right length, wrong value.
WRONG_SECRET = ClusterCredential("f" * 64)
#: A MetadataWrite command of an encoding version no broker knows.
NEWER_COMMAND = b'{"v":2,"t":0,"c":"create","p":"/from-the-future","d":"","o":0,"s":false}'


@dataclass
class Attacked:
    """One mode's cluster, its CA, and the records written so far (topic -> values)."""

    mode: str
    cluster: ProcessCluster
    pki: Pki
    written: dict[str, list[bytes]] = field(default_factory=dict)

    @cached_property
    def attacker_certificate(self) -> CertFiles:
        """A certificate of the cluster's own CA, for 127.0.0.1: the TLS handshake passes."""
        return self.pki.broker("attacker")

    @property
    def quorum(self) -> bool:
        return self.mode != "zookeeper"

    def quorum_security(self, **sasl: str) -> ClientSecurity | None:
        """How to reach the quorum port: TLS with a certificate of the cluster's CA in
        ``quorum-ssl`` mode (``sasl``: a SASL login on top), else plaintext (``sasl`` alone)."""
        if self.mode != "quorum-ssl":
            if not sasl:
                return None
            return ClientSecurity.from_mapping({"security.protocol": "SASL_PLAINTEXT", **sasl})
        cert = self.attacker_certificate
        tls = {"ssl.ca.location": str(self.pki.cafile),
               "ssl.certificate.location": str(cert.certfile),
               "ssl.key.location": str(cert.keyfile)}
        return ClientSecurity.from_mapping(
            {"security.protocol": "SASL_SSL" if sasl else "SSL", **tls, **sasl})

    def quorum_connection(self, port: int, timeout: float = 30, **sasl: str
                          ) -> BrokerConnection:
        """A connection to a quorum port as an attacker sees it (see :meth:`quorum_security`)."""
        return BrokerConnection("127.0.0.1", port, timeout=timeout,
                                security=self.quorum_security(**sasl))

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_of("BROKER")

    def user_security(self) -> ClientSecurity:
        return ClientSecurity.from_mapping({
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(self.pki.cafile),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": PASSWORD})

    def connect(self, broker_id: int, attacker: str) -> BrokerConnection:
        """A connection to ``broker_id`` as ``attacker``: ``anonymous`` on the plaintext
        listener, ``user`` logged in on the SASL_SSL one."""
        b = self.cluster.brokers[broker_id]
        if attacker == "anonymous":
            return BrokerConnection(b.host, b.ports["BROKER"], timeout=30)
        return BrokerConnection("localhost", b.ports["SASL_SSL"], timeout=30,
                                security=self.user_security())


ATTACKERS = ("anonymous", "user")


def add_mallory(attacked: Attacked, base: Path) -> None:
    """The user, made with ``sluice users add``; known to every broker once it returns."""
    add_user(attacked.bootstrap, base, USER, PASSWORD)

    def known_everywhere() -> bool:
        try:
            for i in attacked.cluster.brokers:
                attacked.connect(i, "user").close()
        except SaslAuthenticationError:
            return False
        return True

    wait_for(known_everywhere, 60, f"every broker knows {USER}")


def request(conn: BrokerConnection, forged: Forged) -> Any:
    api, version, body = forged
    return conn.request(api, body, version=version)


def metadata(attacked: Attacked, broker_id: int) -> Any:
    with attacked.connect(broker_id, "anonymous") as c:
        return c.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})


def view(attacked: Attacked) -> dict[int, tuple]:
    """What each running broker tells a fresh client: the brokers' addresses, the controller,
    and each topic's leader, epoch and ISR."""
    out = {}
    for i in running(attacked):
        md = metadata(attacked, i)
        out[i] = (sorted((x.node_id, x.host, x.port) for x in md.brokers), md.controller_id,
                  sorted((t.name, p.partition_index, p.leader_id, p.leader_epoch,
                          tuple(sorted(p.isr_nodes)))
                         for t in md.topics for p in t.partitions))
    return out


def running(attacked: Attacked) -> list[int]:
    return [i for i, b in attacked.cluster.brokers.items()
            if b.proc is not None and b.proc.poll() is None]


def partition(attacked: Attacked, topic: str, broker_id: int | None = None) -> Any:
    """Partition 0 of ``topic`` as ``broker_id`` (default: the first running broker) tells."""
    md = metadata(attacked, running(attacked)[0] if broker_id is None else broker_id)
    (t,) = [t for t in md.topics if t.name == topic]
    return t.partitions[0]


def produce(attacked: Attacked, broker_id: int, topic: str, values: list[bytes], acks: int,
            timeout_ms: int = 10000) -> int:
    """One Produce to ``broker_id``; the partition's error code."""
    from broker_core.wire.records import Record, build_batch

    batch = build_batch([Record(b"k", v, [], 1000) for v in values])
    with attacked.connect(broker_id, "anonymous") as c:
        resp = c.request(ApiKey.PRODUCE, {"acks": acks, "timeout_ms": timeout_ms,
                                          "topic_data": [{"name": topic, "partition_data": [
                                              {"index": 0, "records": batch}]}]}, version=8)
    return resp.responses[0].partition_responses[0].error_code


def write(attacked: Attacked, topic: str, values: list[bytes]) -> None:
    """acks=all to the partition's leader, remembered for the checks that read it back."""
    leader = partition(attacked, topic).leader_id
    assert produce(attacked, leader, topic, values, acks=-1) == 0
    attacked.written.setdefault(topic, []).extend(values)


def high_watermark(attacked: Attacked, broker_id: int, topic: str) -> int:
    with attacked.connect(broker_id, "anonymous") as c:
        resp = c.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def reads_back(attacked: Attacked, topic: str) -> None:
    got, eof = consume_all(attacked.bootstrap, topic, 1, group=f"check-{time.monotonic_ns()}")
    assert eof == {0}
    assert [got[(0, o)] for o in range(len(got))] == attacked.written[topic]


def settled(attacked: Attacked) -> dict[int, tuple]:
    """Every broker's view, once every broker is registered, every partition led, RF 3's ISR
    full and every broker telling the same."""
    def check() -> dict[int, tuple] | None:
        v = view(attacked)
        if len(v) != len(attacked.cluster.brokers) or len({repr(x) for x in v.values()}) != 1:
            return None
        brokers, controller, parts = next(iter(v.values()))
        if len(brokers) != 3 or controller < 0 or any(p[2] < 0 for p in parts):
            return None
        if any(p[0] == RF3 and len(p[4]) != 3 for p in parts):
            return None
        return v

    return wait_for(check, 90, "the cluster settled")


@contextmanager
def stopped(attacked: Attacked, broker_ids: list[int]) -> Iterator[None]:
    """``broker_ids`` stopped with SIGSTOP for the block, SIGCONT after."""
    for i in broker_ids:
        attacked.cluster.brokers[i].kill(signal.SIGSTOP)
    try:
        yield
    finally:
        for i in broker_ids:
            attacked.cluster.brokers[i].kill(signal.SIGCONT)


def create_topic(attacked: Attacked, name: str, replicas: list[int],
                 config: dict[str, str]) -> None:
    with attacked.connect(1, "anonymous") as c:
        resp = c.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": replicas}],
            "configs": [{"name": k, "value": v} for k, v in config.items()]}],
            "timeout_ms": 30000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp


@pytest.fixture(scope="module", params=["zookeeper", "quorum", "quorum-ssl"])
def attacked(request, zookeeper_server, tmp_path_factory) -> Iterator[Attacked]:
    quorum = request.param != "zookeeper"
    base = tmp_path_factory.mktemp(f"attacks-{request.param}")
    pki = make_pki(base / "pki")
    quorum_tls = {}
    if request.param == "quorum-ssl":
        # The quorum listener on SSL with its own certificate, client certificates required.
        node = pki.broker("quorum-node")
        quorum_tls = {"listener.name.quorum.ssl.certfile": str(node.certfile),
                      "listener.name.quorum.ssl.keyfile": str(node.keyfile),
                      "listener.name.quorum.ssl.cafile": str(pki.cafile),
                      "listener.name.quorum.ssl.client.auth": "required"}
    cluster = ProcessCluster(
        None if quorum else zookeeper_server.hosts, base, size=3, quorum=quorum,
        listeners=LISTENERS, quorum_protocol="SSL" if quorum_tls else None, extra={
            **quorum_tls,
            "inter.broker.listener.name": "BROKER",
            "ssl.certfile": str(pki.server.certfile), "ssl.keyfile": str(pki.server.keyfile),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512", "replica.fetch.wait.max.ms": "50",
            "controlled.shutdown.retry.backoff.ms": "200",
            "group.min.session.timeout.ms": "1000", "group.initial.rebalance.delay.ms": "300",
            "rebalance.backoff.ms": "300", "offsets.commit.interval.ms": "200"})
    cluster.start()
    try:
        cluster.wait_registered(timeout=90)
        out = Attacked(request.param, cluster, pki)
        add_mallory(out, base)
        create_topic(out, RF1, [RF1_HOLDER], {})
        create_topic(out, RF3, [1, 2, 3], {"min.insync.replicas": "2"})
        settled(out)
        write(out, RF1, [b"only-%d" % i for i in range(5)])
        write(out, RF3, [b"rep-%d" % i for i in range(5)])
        yield out
    finally:
        cluster.stop()


def refused_everywhere(attacked: Attacked, forged: Callable[[int], list[Forged]]) -> int:
    """Send ``forged(broker_id)`` to every broker as each attacker; every answer must be
    CLUSTER_AUTHORIZATION_FAILED. Returns how many were sent."""
    sent = 0
    for attacker in ATTACKERS:
        for i in attacked.cluster.brokers:
            with attacked.connect(i, attacker) as c:
                for f in forged(i):
                    resp = request(c, f)
                    assert resp.error_code == DENIED, (attacker, i, ApiKey(f[0]).name, resp)
                    sent += 1
    return sent


def test_control_plane_attacks_are_refused_and_change_nothing(attacked):
    before = settled(attacked)
    rf3 = partition(attacked, RF3)
    follower = next(i for i in (1, 2, 3) if i != rf3.leader_id)
    hw = high_watermark(attacked, rf3.leader_id, RF3)

    def every_control_api(i: int) -> list[Forged]:
        # The broker epoch is not known to an attacker: one guess here, 500 below.
        return [stop_replica_delete(RF1, 0, 1),
                leader_and_isr_follower_leads(RF3, 0, follower, 1, rf3.leader_epoch + 1),
                *control_requests(RF3, i, 1, follower, hw)]

    refused_everywhere(attacked, every_control_api)
    refused_everywhere(attacked, lambda i: [alter_partition_shrink(RF3, 0, i, epoch)
                                            for epoch in range(500)])

    assert view(attacked) == before  # addresses, controller, leaders, epochs, ISRs
    holder = attacked.cluster.brokers[RF1_HOLDER]
    assert (holder.log_dir / f"{RF1}-0").is_dir()
    reads_back(attacked, RF1)
    # No split brain: the follower named leader accepts no write; the real leader does, with
    # acks=all and min.insync.replicas=2 (no ISR was shrunk).
    assert produce(attacked, follower, RF3, [b"split"], acks=1) == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    write(attacked, RF3, [b"after-control-attacks"])
    reads_back(attacked, RF3)

    # The brokers still obey their real controller (whose epoch is far below the forged
    # one): the leader stops, the next replica takes over and acks=all still works.
    old_leader = attacked.cluster.brokers[rf3.leader_id]
    old_leader.stop()
    try:
        wait_for(lambda: (p := partition(attacked, RF3, follower)).leader_id not in
                 (-1, rf3.leader_id) and rf3.leader_id not in p.isr_nodes, 60,
                 "a new leader of the RF-3 partition")
        write(attacked, RF3, [b"after-leader-change"])
    finally:
        # The module's other tests need every broker, whatever happened here.
        old_leader.start()
        old_leader.wait_listening()
    settled(attacked)
    reads_back(attacked, RF3)


def test_a_forged_follower_fetch_does_not_acknowledge_a_write(attacked):
    settled(attacked)
    leader = partition(attacked, RF3).leader_id
    followers = [i for i in (1, 2, 3) if i != leader]
    hw = high_watermark(attacked, leader, RF3)
    assert hw == len(attacked.written[RF3])
    with stopped(attacked, followers):
        with attacked.connect(leader, "anonymous") as producer:
            pending = producer.send(ApiKey.PRODUCE, {
                "acks": -1, "timeout_ms": 3000, "topic_data": [{"name": RF3, "partition_data": [
                    {"index": 0, "records": _batch([b"unreplicated"])}]}]}, version=8)
            for attacker in ATTACKERS:
                with attacked.connect(leader, attacker) as c:
                    for f in followers:
                        resp = request(c, follower_fetch(RF3, 0, f, hw + 1_000_000))
                        assert resp.error_code == DENIED, (attacker, resp)
            assert high_watermark(attacked, leader, RF3) == hw
            answer = producer.receive(pending).responses[0].partition_responses[0]
        # Not acknowledged: no follower has it (timed out, or refused once the ISR shrank).
        assert answer.error_code in (ErrorCode.REQUEST_TIMED_OUT,
                                     ErrorCode.NOT_ENOUGH_REPLICAS,
                                     ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND), answer
        assert high_watermark(attacked, leader, RF3) == hw
    # The followers run again: the write is replicated (it was appended), and committed.
    attacked.written[RF3].append(b"unreplicated")
    wait_for(lambda: high_watermark(attacked, leader, RF3) == hw + 1, 60,
             "the write committed once the followers have it")
    settled(attacked)
    write(attacked, RF3, [b"after-forged-fetch"])
    reads_back(attacked, RF3)


def _batch(values: list[bytes]) -> bytes:
    from broker_core.wire.records import Record, build_batch

    return build_batch([Record(b"k", v, [], 1000) for v in values])


def test_commit_offsets_with_a_described_member_id_is_refused(attacked, tmp_path):
    settled(attacked)
    consumer = ConsumerProc(tmp_path, attacked.bootstrap, GROUP, "victim-1", RF3)
    try:
        wait_for(lambda: stable(attacked.bootstrap, GROUP, 1, 1), 60, "the group stable")

        def offsets() -> Any:
            with attacked.connect(_coordinator(attacked), "anonymous") as c:
                g = c.request(ApiKey.DESCRIBE_CONSUMER_GROUPS, {"groups": [GROUP]}).groups[0]
            return g, sorted((o.topic, o.partition, o.offset) for o in g.offsets)

        end = len(attacked.written[RF3])
        wait_for(lambda: offsets()[1] == [(RF3, 0, end)], 60, "the group's offsets committed")
        group, committed = offsets()
        (member,) = [m.consumer_id for m in group.members]
        commit_to = [{"topic": RF3, "partition": 0, "offset": 0}]
        coordinator = _coordinator(attacked)
        for attacker in ATTACKERS:
            with attacked.connect(coordinator, attacker) as c:
                resp = c.request(ApiKey.COMMIT_OFFSETS, {
                    "group_id": GROUP, "consumer_id": member, "offsets": commit_to}, version=0)
                assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID, (attacker, resp)
                for guess in (0, 1, 2, 1 << 62):
                    resp = c.request(ApiKey.COMMIT_OFFSETS, {
                        "group_id": GROUP, "consumer_id": member, "session_id": guess,
                        "offsets": commit_to}, version=1)
                    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID, (attacker, resp)
        assert offsets()[1] == committed
    finally:
        consumer.stop()


def _coordinator(attacked: Attacked) -> int:
    """The coordinator of GROUP (its shard's owner: ClusterMetadata v1 names the group)."""
    with attacked.connect(1, "anonymous") as c:
        resp = c.request(ApiKey.CLUSTER_METADATA, {"group_id": GROUP}, version=1)
    assert resp.error_code == 0 and resp.coordinator_id > 0, resp
    return resp.coordinator_id


# -- the quorum port ---------------------------------------------------------------------------


def describe_quorum(attacked: Attacked) -> Any:
    """DescribeQuorum from the leader (read as a broker, to follow it to the leader)."""
    from sluice_tools.quorum_admin import QuorumAdminClient

    login = ClusterCredential.from_file(cluster_secret_file(attacked.cluster.base)).login
    servers = ",".join(f"127.0.0.1:{p}" for p in attacked.cluster.quorum_ports.values())
    with QuorumAdminClient(servers, timeout_s=30, credential=login,
                           security=attacked.quorum_security()) as client:
        return client.describe()


def quorum_view(attacked: Attacked) -> tuple:
    d = describe_quorum(attacked)
    return (d.leader_id, d.leader_epoch, sorted(v.replica_id for v in d.current_voters),
            d.target_voters)


def describe_at(attacked: Attacked, port: int) -> Any:
    """DescribeQuorum at one quorum port, anonymously (it is read-only and open)."""
    from broker_core.raft import wire
    from broker_core.raft.messages import DescribeQuorumRequest

    message = DescribeQuorumRequest()
    key = wire.api_key_of(message)
    with attacked.quorum_connection(port) as c:
        body = c.request(key, wire.request_body(message), version=wire.VERSIONS[key])
    return wire.response_from_body(key, body)


def forged_voter_fetches_commit_nothing(attacked: Attacked, cluster_id: str, leader: int,
                                        epoch: int) -> None:
    """With both other voters stopped, a metadata write the leader appended is not committed
    by Fetches forged in their names claiming the leader's whole log; once they run again,
    it is."""
    from broker_core.raft.messages import FetchRequest
    from broker_core.raft.metadata_commands import CreateNode, encode
    from broker_core.raft.wire import VERSIONS, api_key_of, request_body
    from sluice_tools.quorum_admin import log_in

    ports = attacked.cluster.quorum_ports
    others = [i for i in ports if i != leader]
    login = ClusterCredential.from_file(cluster_secret_file(attacked.cluster.base)).login

    def leader_end() -> int:
        d = describe_at(attacked, ports[leader])
        return next(v.log_end_offset for v in d.current_voters if v.replica_id == leader)

    with attacked.quorum_connection(ports[leader], timeout=60) as broker:
        log_in(broker, login)
        with stopped(attacked, others):
            end_before = leader_end()
            pending = broker.send(ApiKey.METADATA_WRITE, {
                "node_id": leader, "command": encode(CreateNode("/attack-probe"))}, version=0)
            end = wait_for(lambda: (e := leader_end()) > end_before and e, 30,
                           "the probe write appended by the leader")
            with attacked.quorum_connection(ports[leader]) as c:
                for voter in others:
                    message = FetchRequest(cluster_id, voter, epoch, end, epoch, 0)
                    key = api_key_of(message)
                    resp = c.request(key, request_body(message), version=VERSIONS[key])
                    assert resp.error_code == DENIED, resp
            assert describe_at(attacked, ports[leader]).high_watermark < end  # not committed
        # The voters run again: the write commits (the leader is still the leader).
        assert broker.receive(pending).error_code == 0


# ZooKeeper mode has no quorum port: only the quorum modes are generated.
@pytest.mark.parametrize("attacked", ["quorum", "quorum-ssl"], indirect=True)
def test_the_quorum_port_refuses_every_attack(attacked):
    from sluice_tools.quorum_admin import QuorumAdminError, log_in

    settled(attacked)
    before = quorum_view(attacked)
    leader, epoch = before[0], before[1]
    cluster_id = metadata(attacked, 1).cluster_id
    sessions = range(1, describe_quorum(attacked).high_watermark + 1)
    forged = [*quorum_requests(cluster_id, epoch, leader, 1, RF3),
              (ApiKey.METADATA_WRITE, 0, {"node_id": 2, "command": NEWER_COMMAND})]
    forged += [f for f in quorum_requests(cluster_id, epoch, leader, 1, RF3)[:2]] * 50  # floods
    ports = attacked.cluster.quorum_ports
    for i, port in ports.items():
        with attacked.quorum_connection(port) as c:
            for f in forged:
                resp = request(c, f)
                assert resp.error_code == DENIED, (i, ApiKey(f[0]).name, resp)
        # A client's login (however real) and another cluster's secret are both refused.
        with pytest.raises(SaslAuthenticationError) as refused:
            attacked.quorum_connection(port, **{
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                "sasl.password": PASSWORD})
        assert refused.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        with attacked.quorum_connection(port) as c:
            with pytest.raises(QuorumAdminError) as wrong:
                log_in(c, WRONG_SECRET.login)
            assert wrong.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED

    assert quorum_view(attacked) == before  # leader, epoch, voters, no reassignment
    forged_voter_fetches_commit_nothing(attacked, cluster_id, leader, epoch)
    assert RF3 in {t.name for t in metadata(attacked, 1).topics}
    reads_back(attacked, RF3)
    create_topic(attacked, "after-quorum-attacks", [1, 2, 3], {})  # metadata writes go on

    # A killed broker's session expires while an attacker heartbeats every session id there
    # may be (session ids are metadata log offsets): its registration goes, and so does its
    # leadership.
    victim = next(i for i in (1, 2, 3) if i not in (leader, RF1_HOLDER))
    attacked.cluster.brokers[victim].kill()
    alive = running(attacked)[0]
    served = []  # kept outside the polled condition (wait_for retries on an AssertionError)

    def registration_gone() -> bool:
        with attacked.quorum_connection(ports[leader]) as c:
            for sid in sessions:
                resp = c.request(ApiKey.SESSION_HEARTBEAT, {"node_id": victim,
                                                            "session_id": sid}, version=0)
                if resp.error_code != DENIED:
                    served.append(resp)
        md = metadata(attacked, alive)
        return victim not in {b.node_id for b in md.brokers} and all(
            p.leader_id != victim for t in md.topics for p in t.partitions)

    wait_for(registration_gone, 60, f"broker {victim}'s registration gone")
    assert served == []
    b = attacked.cluster.brokers[victim]
    b.start()
    b.wait_listening()
    settled(attacked)
    assert quorum_view(attacked)[2] == before[2]


def test_every_broker_restarts_after_the_attacks(attacked):
    settled(attacked)
    attacked.cluster.stop()
    attacked.cluster.start()
    attacked.cluster.wait_registered(timeout=90)
    settled(attacked)
    reads_back(attacked, RF1)
    reads_back(attacked, RF3)
    write(attacked, RF3, [b"after-restart"])
    reads_back(attacked, RF3)
