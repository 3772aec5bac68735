"""ZooKeeper ACLs against a real ZooKeeper: brokers with ``zookeeper.set.acl=true`` create
every znode readable by all and writable by the brokers' credential only (secrets readable by
nobody else); an anonymous ZooKeeper client, or one logged in as another identity, can read
the cluster but not change it; such a cluster elects, replicates and restarts as before.

Every test runs once per ``zookeeper.auth.mechanism``: SASL DIGEST-MD5 against a ZooKeeper set
up for it, and the ``digest`` scheme against one without SASL."""

from __future__ import annotations

import subprocess

import pytest
import pytest_twisted
from twisted.internet import reactor, threads
from twisted.logger import Logger, formatEvent

from broker_core import metadata_paths as paths
from broker_core.metadata import AuthFailed, NotAuthorized, SessionState
from broker_core.zk.acl_policy import AclPolicy, ZkCredential, is_sensitive, secure_acl
from broker_core.zk.store import ZooKeeperStore
from tests.conftest import new_chroot
from tests.support.cluster import (
    BrokerProcess,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    listener_port,
    produce,
    restart,
    running_brokers,
    stop_brokers,
)
from tests.support.reassignment_checks import FAST, read_all
from tests.support.zk_acl_harness import (
    PASSWORD,
    TOPIC,
    WRONG_PASSWORD,
    in_isr,
    started_store,
    walk,
    write_auth_file,
)
from tests.support.zookeeper import TEST_SASL_USERS, ZooKeeperServer

ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1]}








@pytest.fixture
def zk_hosts(acl_zk_hosts):
    """This module's ZooKeeper: the one ``zk_auth_mechanism`` needs (tests/conftest.py)."""
    return acl_zk_hosts


@pytest.fixture
def auth_file(tmp_path):
    return write_auth_file(tmp_path)


@pytest.fixture
def credential(auth_file, zk_auth_mechanism):
    return ZkCredential.from_file(str(auth_file), mechanism=zk_auth_mechanism)


@pytest.fixture
def other_credential(zk_auth_mechanism):
    """An identity ZooKeeper accepts that is not the brokers'."""
    if zk_auth_mechanism == "DIGEST-MD5":
        return ZkCredential("other", TEST_SASL_USERS["other"], zk_auth_mechanism)
    return ZkCredential("sluice", WRONG_PASSWORD, zk_auth_mechanism)


@pytest.fixture
def brokers(zk_hosts, tmp_path, auth_file, zk_auth_mechanism):
    yield from running_brokers(zk_hosts, tmp_path, 3, zookeeper_set_acl="true",
                               zookeeper_auth_file=str(auth_file),
                               zookeeper_auth_mechanism=zk_auth_mechanism, **FAST)


@pytest_twisted.ensureDeferred
async def test_every_node_brokers_create_has_the_designed_acl(brokers, zk_hosts, credential):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    await eventually(lambda: all(leader_of(brokers, TOPIC, p) for p in range(2)), what="leaders")
    owner = await started_store(zk_hosts, AclPolicy(credential, set_acl=True))
    try:
        # A credential stored as the users tool stores it: its parent is made on the way.
        await owner.create(f"{paths.USER_CONFIGS}/alice", b"{}", makepath=True)
        # "/" is the chroot: created open by the operator, secured by the brokers at start.
        nodes = await walk(owner)
        for must in (paths.broker(1), paths.CONTROLLER, paths.CONTROLLER_EPOCH, paths.CLUSTER_ID,
                     paths.leader_and_isr(TOPIC, 0), paths.topic(TOPIC), paths.USER_CONFIGS,
                     f"{paths.USER_CONFIGS}/alice"):
            assert must in nodes
        for node in nodes:
            assert tuple(await owner.get_acl(node)) == secure_acl(node, credential), node
        assert [n for n in nodes if is_sensitive(n)] == [paths.USER_CONFIGS,
                                                         f"{paths.USER_CONFIGS}/alice"]
    finally:
        await owner.stop()


@pytest_twisted.ensureDeferred
async def test_an_anonymous_client_reads_but_cannot_change_anything(brokers, zk_hosts,
                                                                   credential):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    await eventually(lambda: all(leader_of(brokers, TOPIC, p) for p in range(2)), what="leaders")
    owner = await started_store(zk_hosts, AclPolicy(credential, set_acl=True))
    await owner.create(f"{paths.USER_CONFIGS}/alice", b"secret-hash", makepath=True)
    anon = await started_store(zk_hosts)
    try:
        before = {n: await owner.get(n) for n in await walk(owner) if n != "/"}
        # Readable: brokers, topics, partition state, the controller.
        assert (await anon.get(paths.broker(1)))[0] == before[paths.broker(1)][0]
        assert sorted(await anon.get_children(paths.BROKER_IDS)) == ["1", "2", "3"]
        assert (await anon.get(paths.leader_and_isr(TOPIC, 0)))[0] == \
            before[paths.leader_and_isr(TOPIC, 0)][0]
        # The ACL shows the brokers' identity to a reader, but no password hash.
        shown = await anon.get_acl(paths.broker(1))
        identity = ("sasl", "sluice") if credential.is_sasl else ("digest", "sluice:x")
        assert {(e.scheme, e.id) for e in shown} == {identity, ("world", "anyone")}
        # Not readable: credentials, not even the user names.
        for node in (paths.USER_CONFIGS, f"{paths.USER_CONFIGS}/alice"):
            with pytest.raises(NotAuthorized):
                await anon.get(node)
        with pytest.raises(NotAuthorized):
            await anon.get_children(paths.USER_CONFIGS)
        # No write of any kind.
        attempts = [
            lambda: anon.set(paths.CONTROLLER_EPOCH, b"999999"),
            lambda: anon.set(paths.leader_and_isr(TOPIC, 0), b"{}"),
            lambda: anon.delete(paths.broker(2)),
            lambda: anon.delete(paths.CONTROLLER),
            lambda: anon.create("/evil"),
            lambda: anon.create(f"{paths.DELETE_TOPICS}/{TOPIC}"),
            lambda: anon.create(paths.topic("evil"), b"{}"),
            lambda: anon.create(f"{paths.USER_CONFIGS}/mallory", b"{}"),
            lambda: anon.delete(paths.topic(TOPIC), recursive=True),
        ]
        for attempt in attempts:
            with pytest.raises(NotAuthorized):
                await attempt()
        after = {n: await owner.get(n) for n in await walk(owner) if n != "/"}
        assert after.keys() == before.keys()
        for node, (value, stat) in before.items():
            assert after[node][0] == value and after[node][1].version == stat.version, node
    finally:
        await anon.stop()
        await owner.stop()


@pytest_twisted.ensureDeferred
async def test_another_identity_reads_but_cannot_change_anything(zk_hosts, credential,
                                                                other_credential):
    owner = await started_store(zk_hosts, AclPolicy(credential, set_acl=True))
    await owner.ensure_path(paths.BROKER_IDS)
    await owner.create(paths.CONTROLLER_EPOCH, b"1")
    await owner.create(f"{paths.USER_CONFIGS}/alice", b"secret-hash", makepath=True)
    await owner.secure_chroot()
    # Logged in (ZooKeeper accepted the login), but as someone the ACLs do not name.
    other = await started_store(zk_hosts, AclPolicy(other_credential, set_acl=True))
    try:
        assert (await other.get(paths.CONTROLLER_EPOCH))[0] == b"1"
        with pytest.raises(NotAuthorized):
            await other.get(f"{paths.USER_CONFIGS}/alice")
        attempts = [
            lambda: other.set(paths.CONTROLLER_EPOCH, b"2"),
            lambda: other.delete(paths.CONTROLLER_EPOCH),
            lambda: other.create(f"{paths.BROKER_IDS}/9", b"{}"),
            lambda: other.create("/evil"),
            lambda: other.set_acl(paths.BROKER_IDS, secure_acl(paths.BROKER_IDS,
                                                               other_credential)),
        ]
        for attempt in attempts:
            with pytest.raises(NotAuthorized):
                await attempt()
        assert (await owner.get(paths.CONTROLLER_EPOCH))[0] == b"1"
        assert await owner.get_children(paths.BROKER_IDS) == []
        assert tuple(await owner.get_acl(paths.BROKER_IDS)) == \
            secure_acl(paths.BROKER_IDS, credential)
    finally:
        await other.stop()
        await owner.stop()


@pytest_twisted.ensureDeferred
async def test_a_refused_sasl_login_fails_the_start_at_once(sasl_zookeeper_server,
                                                            zookeeper_server):
    # (The digest scheme refuses no credential: a wrong one is another identity, above.)
    hosts = new_chroot(sasl_zookeeper_server)
    refused = [
        (hosts, ZkCredential("sluice", WRONG_PASSWORD)),  # a wrong password
        (hosts, ZkCredential("mallory", WRONG_PASSWORD)),  # a user the server lacks
        # A server without SASL set up (a JAAS Server section): it drops the login.
        (zookeeper_server.hosts, ZkCredential("sluice", PASSWORD)),
    ]
    for hosts, cred in refused:
        store = ZooKeeperStore(hosts, reactor=reactor, session_timeout=6.0,
                               acl_policy=AclPolicy(cred))
        with pytest.raises(AuthFailed) as e:
            await store.start()
        message = str(e.value)
        assert "\n" not in message
        assert f"refused the SASL DIGEST-MD5 login of user {cred.username!r} (AUTH_FAILED)" in \
            message
        assert "wrong password" in message and "zookeeper.auth.mechanism=digest" in message
        assert not store._pool.started  # nothing left running: no stop() needed
        await store.stop()


def test_a_broker_process_whose_login_is_refused_exits_1_saying_why(sasl_zookeeper_server,
                                                                    tmp_path):
    """As a process (``twist broker``): no retrying, no hanging; exit status 1 for its
    supervisor and one line in its log naming the cause."""
    (tmp_path / "wrong").mkdir()
    wrong = write_auth_file(tmp_path / "wrong", password=WRONG_PASSWORD)
    proc = BrokerProcess(1, new_chroot(sasl_zookeeper_server), tmp_path,
                         extra={"zookeeper.set.acl": "true", "zookeeper.auth.file": str(wrong)})
    proc.start()
    try:
        assert proc.proc.wait(timeout=60) == 1
    finally:
        proc.stop()
    failed = [line for line in proc.log_text().splitlines() if "failed to start" in line]
    assert len(failed) == 1, proc.log_tail()
    assert "refused the SASL DIGEST-MD5 login of user 'sluice' (AUTH_FAILED)" in failed[0]


@pytest.fixture
def private_sasl_zookeeper():
    """A SASL ZooKeeper of this test's own: the test changes its users and restarts it."""
    server = ZooKeeperServer(sasl_users=TEST_SASL_USERS)
    server.start()
    yield server
    server.stop()


@pytest_twisted.ensureDeferred
async def test_a_login_refused_on_reconnect_ends_the_session_and_says_why(
        private_sasl_zookeeper):
    server = private_sasl_zookeeper
    store = await started_store(server.hosts, AclPolicy(ZkCredential("sluice", PASSWORD)))
    events: list[dict] = []
    store.log = Logger(namespace=store.log.namespace, observer=events.append)

    def lines() -> list[str]:
        return [formatEvent(e) for e in events]

    try:
        assert await store.exists("/") is not None
        assert not [line for line in lines() if "AUTH_FAILED" in line]
        # The operators change the brokers' password on the servers, not in the broker.
        server.sasl_users["sluice"] = WRONG_PASSWORD
        await threads.deferToThread(server.restart)
        await eventually(lambda: store.state is SessionState.LOST, timeout=30,
                         what="the session ended")
        refused = [line for line in lines() if "AUTH_FAILED" in line]
        assert len(refused) == 1, refused
        assert "refused the SASL DIGEST-MD5 login of user 'sluice'" in refused[0]
        assert "restart once the credential is fixed" in refused[0]
    finally:
        await store.stop()


@pytest_twisted.ensureDeferred
async def test_a_cluster_with_acls_elects_replicates_and_restarts(brokers, zk_hosts):
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
    assert (await produce(leader, TOPIC, 0, [b"one", b"two"], acks=-1)).error_code == 0

    # The controller goes; another is elected (it writes /controller and the epoch).
    await ctrl.stopService()
    rest = [b for b in brokers if b is not ctrl]
    await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    leader = await eventually(lambda: leader_of(rest, TOPIC, 0), what="leader")
    assert (await produce(leader, TOPIC, 0, [b"three"], acks=-1)).error_code == 0

    # The old controller comes back (re-registers its ephemeral node) and catches up.
    back = await restart(ctrl)
    brokers[brokers.index(ctrl)] = back
    store = rest[0].store
    await eventually(lambda: in_isr(store, back.broker_id), timeout=30, what="back in ISR")
    assert await read_all(leader, TOPIC, 0) == [b"one", b"two", b"three"]

    # A real Kafka client produces (acks=all: every replica) and consumes through the cluster.
    leader = await eventually(lambda: leader_of(brokers, TOPIC, 1), what="leader of 1")
    kcat = ["kcat", "-b", f"127.0.0.1:{listener_port(leader)}", "-t", TOPIC, "-p", "1"]
    lines = b"".join(b"record-%d\n" % i for i in range(20))
    put = await threads.deferToThread(subprocess.run, [*kcat, "-P", "-X", "acks=all"],
                                      input=lines, capture_output=True, timeout=60)
    assert put.returncode == 0, put.stderr
    got = await threads.deferToThread(subprocess.run, [*kcat, "-C", "-e", "-q"],
                                      capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [b"record-%d" % i for i in range(20)]
    await stop_brokers([back])




@pytest_twisted.ensureDeferred
async def test_parents_made_on_the_way_get_their_own_acl(zk_hosts, credential):
    owner = await started_store(zk_hosts, AclPolicy(credential, set_acl=True))
    try:
        await owner.create(f"{paths.USER_CONFIGS}/alice", b"{}", makepath=True)
        await owner.ensure_path(f"{paths.TOPIC_CONFIGS}")
        assert tuple(await owner.get_acl(paths.CONFIG)) == secure_acl(paths.CONFIG, credential)
        assert len(secure_acl(paths.CONFIG, credential)) == 2  # world may read /config
        for node in (paths.USER_CONFIGS, f"{paths.USER_CONFIGS}/alice"):
            assert tuple(await owner.get_acl(node)) == secure_acl(node, credential)
            assert len(secure_acl(node, credential)) == 1
        assert tuple(await owner.get_acl(paths.TOPIC_CONFIGS)) == \
            secure_acl(paths.TOPIC_CONFIGS, credential)
    finally:
        await owner.stop()
