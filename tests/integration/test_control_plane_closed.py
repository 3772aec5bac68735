"""The closed control plane, attacked from plain client sockets against a real three-broker
cluster (in-process brokers, real sockets) in both metadata modes: every control API is
refused with CLUSTER_AUTHORIZATION_FAILED and changes nothing (the partition's directory is
still there, the ISR unchanged, the brokers' addresses unchanged, the high watermark not moved
by a forged follower Fetch), a login with another secret is refused, and the cluster itself
(whose brokers log in to each other with the cluster secret) still replicates, elects and shuts
down cleanly. In quorum mode the quorum port refuses the same way every quorum API that acts,
and a broker given another secret cannot join while the others keep working. A broker without
``cluster.secret.file`` refuses to start and says how to make one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.logger import formatEvent, globalLogPublisher

from broker_core import metadata_paths as paths
from broker_core.broker import BrokerService, StartupError
from broker_core.config.parsing import ConfigError
from broker_core.raft import wire
from broker_core.raft.messages import (
    DescribeQuorumRequest,
)
from broker_core.rpc import KafkaClientProtocol, SaslAuthenticationError, connect_client
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import (
    broker_config,
    call,
    controller_of,
    create_topic,
    eventually,
    free_port,
    leader_of,
    produce,
    stop_brokers,
)
from tests.support.forged_requests import control_requests, quorum_requests

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
#: Another cluster's secret: right length, wrong value.
WRONG = ClusterCredential("f" * 64)
VERSIONS_BODY = {"client_software_name": "attacker", "client_software_version": "1"}


def configs(mode: str, base: Path, zk_hosts: str, **extra: str) -> list:
    if mode == "zookeeper":
        return [broker_config(i, zk_hosts, base / f"broker-{i}", **extra) for i in (1, 2, 3)]
    ports = {i: free_port() for i in (1, 2, 3)}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return [broker_config(i, "", base / f"broker-{i}", metadata_store="quorum",
                          quorum_voters=voters, cluster_id="closed-test", **extra)
            for i in (1, 2, 3)]


async def start(cfgs: list) -> list[BrokerService]:
    brokers = [BrokerService(c, reactor=reactor) for c in cfgs]
    results = await defer.DeferredList([defer.maybeDeferred(b.startService) for b in brokers],
                                       consumeErrors=True)
    failed = [r for ok, r in results if not ok]
    if failed:
        await stop_brokers([b for b in brokers if b.running])
        failed[0].raiseException()
    return brokers


@pytest.fixture(params=["zookeeper", "quorum"])
def cluster(request, tmp_path):
    zk_hosts = request.getfixturevalue("zk_hosts") if request.param == "zookeeper" else ""
    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(start(configs(
        request.param, tmp_path, zk_hosts, controlled_shutdown_retry_backoff_ms="200"))))
    try:
        yield brokers
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))


def partition_state(brokers: list[BrokerService]) -> list:
    """What the attacks would change, per broker: the partition's directory and role, the
    ISR and leader it knows, the brokers' addresses it tells clients, its high watermark."""
    out = []
    for b in brokers:
        p = b.replicas.get_partition("t", 0)
        st = b.cache.topics["t"][0]
        out.append((b.broker_id, p is not None, p is not None and p.is_leader,
                    p is not None and p.log.directory.is_dir(), st.leader, st.leader_epoch,
                    tuple(st.isr), sorted((x.id, x.host, x.port) for x in b.cache.brokers.values()),
                    p.high_watermark if p is not None and p.is_leader else None))
    return out


async def metadata_brokers(broker: BrokerService) -> list:
    resp = await call(broker, ApiKey.METADATA, 12, {"topics": None,
                                                    "allow_auto_topic_creation": False,
                                                    "include_cluster_authorized_operations":
                                                        False,
                                                    "include_topic_authorized_operations":
                                                        False})
    return sorted((b.node_id, b.host, b.port) for b in resp.brokers)


async def login(proto: KafkaClientProtocol, credential: ClusterCredential) -> None:
    c = credential.login
    await proto.authenticate(c.mechanism, c.username, c.password)


@pytest_twisted.ensureDeferred
async def test_control_apis_from_client_sockets_are_refused_and_change_nothing(cluster):
    brokers = cluster
    ctrl = await eventually(lambda: controller_of(brokers), what="an active controller")
    await create_topic(brokers[0], "t", partitions=1, rf=3)
    leader = await eventually(lambda: leader_of(brokers, "t", 0), what="a leader of t-0")
    await eventually(lambda: len(leader.replicas.get_partition("t", 0).isr) == 3,
                     what="a full ISR")
    assert (await produce(leader, "t", 0, [b"a", b"b"], acks=-1)).error_code == 0
    follower = next(b for b in brokers if b is not leader)
    hw = leader.replicas.get_partition("t", 0).high_watermark
    await eventually(lambda: all(
        b.replicas.get_partition("t", 0).log.log_end_offset == hw for b in brokers),
        what="followers caught up")
    before = partition_state(brokers)
    addresses = await metadata_brokers(brokers[0])

    for target in brokers:  # every broker, the controller and the leader among them
        for api, version, body in control_requests("t", target.broker_id,
                                                    target.registration_epoch,
                                                    follower.broker_id, hw):
            resp = await call(target, api, version, body)
            assert resp.error_code == DENIED, (target.broker_id, ApiKey(api).name)
    # ApiVersions shows a client none of the control APIs.
    shown = {k.api_key for k in (await call(ctrl, ApiKey.API_VERSIONS, 3,
                                            VERSIONS_BODY)).api_keys}
    assert not shown & {4, 5, 6, 7, 56, 63}
    # A login with another cluster's secret fails, and the connection is closed.
    proto = await connect_client(reactor, "127.0.0.1", ctrl.port.getHost().port, "attacker")
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        await login(proto, WRONG)
    await proto.closed_d

    assert partition_state(brokers) == before
    assert await metadata_brokers(brokers[0]) == addresses
    assert all(b.replicas.get_partition("t", 0).log.directory.is_dir() for b in brokers)

    # The cluster, whose brokers do log in to each other, still replicates ...
    assert (await produce(leader, "t", 0, [b"c"], acks=-1)).error_code == 0
    await eventually(lambda: all(
        b.replicas.get_partition("t", 0).log.log_end_offset == hw + 1 for b in brokers),
        what="the new record on every replica")
    assert leader.replicas.get_partition("t", 0).high_watermark == hw + 1
    # ... elects (the partition's leader stops: the controller moves leadership, shrinking
    # the ISR through AlterPartition or its own decision) and shuts down cleanly.
    await leader.stopService()
    rest = [b for b in brokers if b is not leader]
    await eventually(lambda: controller_of(rest), timeout=30, what="a controller")
    new_leader = await eventually(lambda: leader_of(rest, "t", 0), timeout=30,
                                  what="a new leader of t-0")
    assert new_leader is not leader
    assert (await produce(new_leader, "t", 0, [b"d"], acks=-1)).error_code == 0
    for b in rest:
        await b.stopService()
    assert not any(b.running for b in brokers)


# -- the quorum port ---------------------------------------------------------------------------


@pytest.fixture
def quorum_cluster(tmp_path):
    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(start(configs(
        "quorum", tmp_path, ""))))
    try:
        yield brokers
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))


def quorum_state(brokers: list[BrokerService]) -> tuple:
    leader = next(b for b in brokers if b.quorum.client.leading)
    node = leader.quorum.client.driver.node
    return (leader.broker_id, node.epoch, tuple(sorted(node.voters)),
            leader.quorum.client.tree.exists(paths.topic("t")),
            sorted(leader.quorum.client.tree.sessions))


async def quorum_call(port: int, api: int, version: int, body: dict,
                      credential: ClusterCredential | None = None) -> object:
    proto = await connect_client(reactor, "127.0.0.1", port, "attacker")
    try:
        if credential is not None:
            await login(proto, credential)
        return await proto.request(api, version, body)
    finally:
        proto.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_the_quorum_port_serves_brokers_only(quorum_cluster, tmp_path):
    brokers = quorum_cluster
    await eventually(lambda: controller_of(brokers), what="an active controller")
    await create_topic(brokers[0], "t", partitions=1, rf=3)
    leader = await eventually(lambda: next((b for b in brokers if b.quorum.client.leading),
                                           None), what="a quorum leader")
    session_id = brokers[1].store.session_id
    before = quorum_state(brokers)
    epoch = leader.quorum.client.driver.node.epoch
    assert before[3] and session_id in before[4]

    ports = [b.quorum.listen[1] for b in brokers]
    for port in ports:
        for api, version, body in quorum_requests("closed-test", epoch, leader.broker_id,
                                                  session_id, "t"):
            resp = await quorum_call(port, api, version, body)
            assert resp.error_code == DENIED, (port, ApiKey(api).name)
            # Another cluster's secret does not log in: nothing is even asked.
            with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                await quorum_call(port, api, version, body, WRONG)
    assert quorum_state(brokers) == before
    # Read-only DescribeQuorum and ApiVersions stay open; a broker's login is served.
    resp = await quorum_call(ports[0], ApiKey.DESCRIBE_QUORUM, 1,
                             wire.request_body(DescribeQuorumRequest()))
    assert resp.error_code == 0
    gossip = await quorum_call(ports[0], ApiKey.DISCOVER_BROKERS, 0, {
        "node": {"node_id": -1, "host": "", "port": 0, "boot_time_ms": -1}, "brokers": [],
        "cluster_id": None, "voter_ids": []}, brokers[0].cluster_credential)
    assert gossip.error_code == 0 and gossip.cluster_id == "closed-test"

    # A broker with another secret cannot join: each quorum node refuses its login (it says
    # so in its log), so it never opens its metadata session and its start fails, while the
    # cluster goes on.
    wrong_file = tmp_path / "other.secret"
    wrong_file.write_text(WRONG.secret)
    os.chmod(wrong_file, 0o600)
    cfg = broker_config(4, "", tmp_path / "broker-4", metadata_store="quorum",
                        quorum_voters=brokers[0].config.quorum_voters,
                        quorum_listener=f"127.0.0.1:{free_port()}", cluster_id="closed-test",
                        cluster_secret_file=str(wrong_file),
                        zookeeper_connection_timeout_ms="3000")
    lines: list[str] = []

    def observe(event: dict) -> None:
        if "log_format" in event:
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    intruder = BrokerService(cfg, reactor=reactor)
    try:
        with pytest.raises(StartupError):
            await intruder.startService()
    finally:
        globalLogPublisher.removeObserver(observe)
        await intruder.stopService()
    assert any("refused the cluster login: wrong cluster.secret.file?" in line
               for line in lines), lines[-20:]
    assert 4 not in brokers[0].cache.brokers
    await create_topic(brokers[1], "after", partitions=1, rf=3)
    part_leader = await eventually(lambda: leader_of(brokers, "after", 0),
                                   what="a leader of 'after'")
    assert (await produce(part_leader, "after", 0, [b"x"], acks=-1)).error_code == 0
    assert quorum_state(brokers)[2] == before[2]  # the voters


def test_a_broker_without_the_cluster_secret_refuses_to_start(tmp_path):
    from broker_core.config.broker_config import BrokerConfig

    cfg = BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": str(tmp_path / "d"),
                                     "zookeeper.connect": "127.0.0.1:1"})
    with pytest.raises(ConfigError, match="cluster.secret.file.*sluice secret create FILE"):
        BrokerService(cfg, reactor=reactor)


@pytest_twisted.ensureDeferred
async def test_a_broker_with_another_secret_gets_nothing_in_zookeeper_mode(zk_hosts, tmp_path):
    # It registers (ZooKeeper is not guarded by the cluster secret), but no broker accepts its
    # login nor it theirs: the controller's LeaderAndIsr never reaches it (logged), it never
    # fetches, and the others go on.
    brokers = await start(configs("zookeeper", tmp_path, zk_hosts)[:2])
    wrong_file = tmp_path / "other.secret"
    wrong_file.write_text(WRONG.secret)
    os.chmod(wrong_file, 0o600)
    lines: list[str] = []

    def observe(event: dict) -> None:
        if "log_format" in event:
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    intruder = BrokerService(broker_config(3, zk_hosts, tmp_path / "broker-3",
                                           cluster_secret_file=str(wrong_file),
                                           controlled_shutdown_enable="false"),
                             reactor=reactor)
    try:
        await intruder.startService()
        await eventually(lambda: all(3 in b.cache.brokers for b in brokers),
                         what="broker 3 registered")
        await create_topic(brokers[0], "shared", assignment={0: [1, 3]})
        await create_topic(brokers[0], "ours", assignment={0: [1, 2]})
        await eventually(lambda: any("broker 3 refused the cluster login: wrong "
                                     "cluster.secret.file?" in line for line in lines),
                         what="the controller's refused login to broker 3 in the log")
        part_leader = await eventually(lambda: leader_of(brokers, "ours", 0),
                                       what="a leader of 'ours'")
        assert (await produce(part_leader, "ours", 0, [b"x"], acks=-1)).error_code == 0
        assert intruder.replicas.get_partition("shared", 0) is None
        assert intruder.replicas.get_partition("ours", 0) is None
    finally:
        globalLogPublisher.removeObserver(observe)
        await intruder.stopService()
        await stop_brokers(brokers)
