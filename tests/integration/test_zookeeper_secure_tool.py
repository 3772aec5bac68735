"""``sluice zookeeper secure`` against a real ZooKeeper and a running cluster: an open cluster
is rolled onto ``zookeeper.set.acl=true``, the tool converts the nodes created before (a dry
run first, which changes nothing), a second run changes nothing, the cluster keeps electing,
replicating and restarting, and ``--unsecure`` reverts. Bad auth files and a wrong credential
are refused with one line and change nothing. The tool runs as a real subprocess. Every test
runs once per ``zookeeper.auth.mechanism`` (SASL DIGEST-MD5, and the ``digest`` scheme)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest
import pytest_twisted
from twisted.internet import threads

from broker_core import metadata_paths as paths
from broker_core.metadata import NotAuthorized
from broker_core.zk.acl_policy import OPEN_ACL, AclPolicy, ZkCredential, secure_acl
from tests.conftest import new_chroot
from tests.support.cli_runs import ROOT, one_line_error
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    restart,
    running_brokers,
    stop_brokers,
)
from tests.support.reassignment_checks import FAST, read_all
from tests.support.zk_acl_harness import TOPIC, WRONG_PASSWORD, in_isr, started_store, walk, write_auth_file
from tests.support.zookeeper import TEST_SASL_USERS

ASSIGNMENT = {0: [1, 2, 3]}


@pytest.fixture
def zk_hosts(acl_zk_hosts):
    """This module's ZooKeeper: the one ``zk_auth_mechanism`` needs (tests/conftest.py)."""
    return acl_zk_hosts


async def sluice(*args: str) -> subprocess.CompletedProcess:
    """``sluice ARGS`` in a subprocess (from a thread: the brokers run on this reactor)."""
    return await threads.deferToThread(
        subprocess.run, [sys.executable, "-m", "sluice_tools.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60)


async def acls(store, nodes=None) -> dict[str, set]:
    return {n: set(await store.get_acl(n)) for n in (nodes or await walk(store))}


@pytest.fixture
def open_brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, **FAST)


@pytest_twisted.ensureDeferred
async def test_secure_an_open_cluster_then_revert(open_brokers, zk_hosts, tmp_path,
                                                  zk_auth_mechanism):
    brokers = open_brokers
    auth = write_auth_file(tmp_path)
    cred = ZkCredential.from_file(str(auth), mechanism=zk_auth_mechanism)
    tool = ("zookeeper", "secure", "--zookeeper", zk_hosts, "--auth-file", str(auth),
            "--auth-mechanism", zk_auth_mechanism)
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
    assert (await produce(leader, TOPIC, 0, [b"a"])).error_code == 0

    # Roll every broker onto zookeeper.set.acl=true, one at a time.
    await roll_brokers(brokers, zookeeper_set_acl=True, zookeeper_auth_file=str(auth),
                       zookeeper_auth_mechanism=zk_auth_mechanism)
    store = brokers[0].store
    await eventually(lambda: _all_in_isr(store), timeout=30, what="full ISR")

    owner = await started_store(zk_hosts, AclPolicy(cred))
    try:
        before = await acls(owner)
        still_open = sorted(n for n, a in before.items() if a == set(OPEN_ACL))
        assert paths.topic(TOPIC) in still_open and paths.BROKER_IDS in still_open

        r = await sluice(*tool, "--dry-run")
        assert r.returncode == 0, r.stderr
        listed = re.findall(r"^would change (\S+): ", r.stdout, re.M)
        assert sorted(listed) == still_open
        assert f"{len(still_open)} node(s) would change" in r.stdout
        assert await acls(owner, before) == before  # a dry run changes nothing

        r = await sluice(*tool)
        assert r.returncode == 0, r.stderr
        assert sorted(re.findall(r"^changed (\S+): ", r.stdout, re.M)) == still_open
        for node, acl in (await acls(owner)).items():
            assert acl == set(secure_acl(node, cred)), node
        r = await sluice(*tool)
        assert r.returncode == 0 and "0 node(s) changed (all as wanted already)" in r.stdout

        anon = await started_store(zk_hosts)
        try:
            with pytest.raises(NotAuthorized):
                await anon.create(paths.topic("evil"), b"{}")
            with pytest.raises(NotAuthorized):
                await anon.set(paths.leader_and_isr(TOPIC, 0), b"{}")
        finally:
            await anon.stop()

        # The secured cluster keeps working: writes, a controller failover, a restart.
        leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
        assert (await produce(leader, TOPIC, 0, [b"b"])).error_code == 0
        ctrl = await eventually(lambda: controller_of(brokers), what="controller")
        await ctrl.stopService()
        rest = [b for b in brokers if b is not ctrl]
        await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
        back = await restart(ctrl)
        brokers[brokers.index(ctrl)] = back
        await eventually(lambda: in_isr(rest[0].store, back.broker_id), timeout=30,
                         what="restarted broker in ISR")
        leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
        assert await read_all(leader, TOPIC, 0) == [b"a", b"b"]

        # Going back as documented: roll the brokers off zookeeper.set.acl (keeping their
        # credential), then --unsecure opens everything. Before the roll, nodes the brokers
        # create after the tool ran (ISR changes, notifications) would be secured again.
        await roll_brokers(brokers, zookeeper_set_acl=False)
        r = await sluice(*tool, "--unsecure")
        assert r.returncode == 0, r.stderr
        assert all(acl == set(OPEN_ACL) for acl in (await acls(owner)).values())
    finally:
        await owner.stop()
        await stop_brokers([b for b in brokers if b.running])


async def roll_brokers(brokers: list, **changes) -> None:
    """A rolling restart: each broker in turn stopped, its config changed by ``changes``, and
    started again (its new incarnation replaces it in ``brokers``)."""
    for i, b in enumerate(list(brokers)):
        await b.stopService()
        b.config = dataclasses.replace(b.config, **changes)
        brokers[i] = await restart(b)


async def _all_in_isr(store) -> bool:
    from tests.support.reassignment_checks import zk_state

    return sorted((await zk_state(store, TOPIC, 0)).isr) == [1, 2, 3]


@pytest_twisted.ensureDeferred
async def test_bad_auth_files_and_a_wrong_credential_are_refused(zk_hosts, tmp_path,
                                                                 zk_auth_mechanism):
    auth = write_auth_file(tmp_path)
    cred = ZkCredential.from_file(str(auth), mechanism=zk_auth_mechanism)
    owner = await started_store(zk_hosts, AclPolicy(cred, set_acl=True))
    try:
        # A secured tree to protect, as a broker leaves it: the chroot node too.
        await owner.ensure_path(paths.BROKER_IDS)
        await owner.secure_chroot()
        before = await acls(owner)

        loose = tmp_path / "loose"
        loose.write_text(auth.read_text())
        os.chmod(loose, 0o644)
        malformed = tmp_path / "malformed"
        malformed.write_text("no-colon-here\n")
        os.chmod(malformed, 0o600)
        (tmp_path / "wrong").mkdir()
        wrong = write_auth_file(tmp_path / "wrong", password=WRONG_PASSWORD)
        (tmp_path / "other").mkdir()
        other = write_auth_file(tmp_path / "other", "other", TEST_SASL_USERS["other"])
        cases = [(tmp_path / "missing", zk_auth_mechanism, "does not exist"),
                 (loose, zk_auth_mechanism, "accessible by other users"),
                 (malformed, zk_auth_mechanism, "username:password"),
                 (auth, "PLAIN", "DIGEST-MD5 or digest"),
                 # Logged in as another identity: the walk stops at the first node.
                 (other, zk_auth_mechanism, "not allowed to change or list /")]
        if zk_auth_mechanism == "DIGEST-MD5":  # SASL refuses the login itself
            cases.append((wrong, zk_auth_mechanism, "refused the SASL DIGEST-MD5 login of "
                          "user 'sluice' (AUTH_FAILED)"))
            # The brokers' file with the other mechanism: the digest identity of the same
            # user and password is not the one the ACLs name.
            cases.append((auth, "digest", "and --auth-mechanism their "
                          "zookeeper.auth.mechanism?"))
        else:  # the digest scheme takes any password: it is just another identity
            cases.append((wrong, zk_auth_mechanism, "not allowed to change or list /"))
        for path, mechanism, why in cases:
            r = await sluice("zookeeper", "secure", "--zookeeper", zk_hosts, "--auth-file",
                             str(path), "--auth-mechanism", mechanism)
            assert r.returncode == 1, (path, r.stdout, r.stderr)
            assert why in one_line_error(r), r.stderr
            assert await acls(owner, before) == before
    finally:
        await owner.stop()


@pytest.fixture
def secured_brokers(zk_hosts, tmp_path, zk_auth_mechanism):
    auth = write_auth_file(tmp_path)
    yield from running_brokers(zk_hosts, tmp_path, 1, zookeeper_set_acl="true",
                               zookeeper_auth_file=str(auth),
                               zookeeper_auth_mechanism=zk_auth_mechanism, **FAST)


@pytest_twisted.ensureDeferred
async def test_admin_commands_on_a_secured_cluster_need_the_auth_file(secured_brokers, zk_hosts,
                                                                       tmp_path,
                                                                       zk_auth_mechanism):
    (broker,) = secured_brokers
    await eventually(lambda: controller_of(secured_brokers), what="controller")
    auth = tmp_path / "zk-auth"
    r = await sluice("topics", "create", "--zookeeper", zk_hosts, "--topic", "t1",
                     "--partitions", "1", "--replication-factor", "1")
    assert r.returncode == 1
    assert "--zookeeper-auth-file" in one_line_error(r)
    r = await sluice("topics", "list", "--zookeeper", zk_hosts)  # reading needs nothing
    assert r.returncode == 0, r.stderr
    # DIGEST-MD5 is the tools' default, as the brokers'.
    mechanism = [] if zk_auth_mechanism == "DIGEST-MD5" else ["--zookeeper-auth-mechanism",
                                                             zk_auth_mechanism]
    if zk_auth_mechanism == "DIGEST-MD5":
        (tmp_path / "wrong").mkdir()
        wrong = write_auth_file(tmp_path / "wrong", password=WRONG_PASSWORD)
        r = await sluice("topics", "create", "--zookeeper", zk_hosts, "--zookeeper-auth-file",
                         str(wrong), "--topic", "t0", "--partitions", "1",
                         "--replication-factor", "1")
        assert r.returncode == 1
        assert "refused the SASL DIGEST-MD5 login of user 'sluice' (AUTH_FAILED)" in \
            one_line_error(r)
    r = await sluice("topics", "create", "--zookeeper", zk_hosts, "--zookeeper-auth-file",
                     str(auth), *mechanism, "--topic", "t1", "--partitions", "1",
                     "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    assert sorted(await broker.store.get_children(paths.TOPICS)) == ["t1"]
    cred = ZkCredential.from_file(str(auth), mechanism=zk_auth_mechanism)
    assert set(await broker.store.get_acl(paths.topic("t1"))) == \
        set(secure_acl(paths.topic("t1"), cred))
    await eventually(lambda: leader_of(secured_brokers, "t1", 0), what="t1 led")


@pytest_twisted.ensureDeferred
async def test_a_broker_with_another_credential_does_not_start(secured_brokers, zk_hosts,
                                                                tmp_path, zk_auth_mechanism):
    from twisted.internet import reactor

    from broker_core.broker import BrokerService, StartupError
    from tests.support.cluster import broker_config

    (tmp_path / "wrong").mkdir()
    wrong = write_auth_file(tmp_path / "wrong", password=WRONG_PASSWORD)
    (tmp_path / "other").mkdir()
    other = write_auth_file(tmp_path / "other", "other", TEST_SASL_USERS["other"])
    if zk_auth_mechanism == "DIGEST-MD5":
        cases = [(wrong, "refused the SASL DIGEST-MD5 login of user 'sluice' (AUTH_FAILED)"),
                 (other, "ACL is for another credential")]
    else:
        cases = [(wrong, "ACL is for another credential")]
    for n, (auth, why) in enumerate(cases, 2):
        cfg = broker_config(n, zk_hosts, tmp_path / f"broker-{n}", zookeeper_set_acl="true",
                            zookeeper_auth_file=str(auth),
                            zookeeper_auth_mechanism=zk_auth_mechanism)
        svc = BrokerService(cfg, reactor=reactor)
        with pytest.raises(StartupError) as e:
            await svc.startService()
        await svc.stopService()
        assert why in str(e.value) and "\n" not in str(e.value)
        assert str(n) not in await secured_brokers[0].store.get_children(paths.BROKER_IDS)


@pytest_twisted.ensureDeferred
async def test_a_cluster_secured_with_digest_moves_to_sasl(sasl_zookeeper_server, tmp_path):
    """The way docs/zookeeper.md gives for changing the mechanism of a secured cluster: roll
    the brokers without ``zookeeper.set.acl``, open the nodes with the old mechanism, roll
    them onto the new one, secure the nodes with it."""
    from tests.support.cluster import start_brokers

    hosts = new_chroot(sasl_zookeeper_server)
    auth = write_auth_file(tmp_path)
    digest = ZkCredential.from_file(str(auth), mechanism="digest")
    sasl = ZkCredential.from_file(str(auth), mechanism="DIGEST-MD5")
    brokers = await start_brokers(hosts, tmp_path, 3, zookeeper_set_acl="true",
                                  zookeeper_auth_file=str(auth),
                                  zookeeper_auth_mechanism="digest", **FAST)
    owner = await started_store(hosts, AclPolicy(sasl))
    try:
        await eventually(lambda: controller_of(brokers), what="controller")
        await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
        leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
        assert (await produce(leader, TOPIC, 0, [b"a"], acks=-1)).error_code == 0
        # (Only the digest identity, with ADMIN, sees its own hash in the ACL.)
        old_owner = await started_store(hosts, AclPolicy(digest))
        try:
            assert set(await old_owner.get_acl(paths.topic(TOPIC))) == \
                set(secure_acl(paths.topic(TOPIC), digest))
        finally:
            await old_owner.stop()

        async def roll(**changes) -> None:
            await roll_brokers(brokers, **changes)
            await eventually(lambda: _all_in_isr(brokers[0].store), timeout=30,
                             what="full ISR")

        await roll(zookeeper_set_acl=False)
        r = await sluice("zookeeper", "secure", "--zookeeper", hosts, "--auth-file", str(auth),
                         "--auth-mechanism", "digest", "--unsecure")
        assert r.returncode == 0, r.stderr
        assert all(acl == set(OPEN_ACL) for acl in (await acls(owner)).values())

        await roll(zookeeper_set_acl=True, zookeeper_auth_mechanism="DIGEST-MD5")
        r = await sluice("zookeeper", "secure", "--zookeeper", hosts, "--auth-file", str(auth))
        assert r.returncode == 0, r.stderr
        for node, acl in (await acls(owner)).items():
            assert acl == set(secure_acl(node, sasl)), node

        leader = await eventually(lambda: leader_of(brokers, TOPIC, 0), what="leader")
        assert (await produce(leader, TOPIC, 0, [b"b"], acks=-1)).error_code == 0
        assert await read_all(leader, TOPIC, 0) == [b"a", b"b"]
    finally:
        await owner.stop()
        await stop_brokers([b for b in brokers if b.running])
