"""DescribeUserScramCredentials / AlterUserScramCredentials through real in-process brokers, in
both metadata modes, with confluent-kafka's AdminClient (the real Kafka-client check) and with
``sluice users``.

Two brokers in ZooKeeper mode show a credential altered through one reaching the other's cache
(what its SASL logins will check); one broker on its own one-voter metadata quorum shows the same
in quorum mode. Bad requests (a reserved name, iterations out of range, one user and mechanism
twice, deleting what is not there) get Kafka's error per user and change nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from broker_core.security.scram_credential import salted_password
from broker_core.server.user_admin import describe_credentials
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from sluice_tools import cli
from tests.support.cluster import (
    broker_config,
    call,
    eventually,
    free_port,
    start_brokers,
    stop_brokers,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["zookeeper", "quorum"])
def mode(request):
    return request.param


#: These tests manage users from plaintext, unauthenticated clients: without ACLs the user
#: APIs are served only to brokers and ``super.users``, so the anonymous principal is made one
#: (an operator's explicit opt-in; the refusal without it is tested below).
OPEN_USER_ADMIN = {"super_users": "User:ANONYMOUS"}


async def _start(mode: str, request, tmp_path) -> list:
    """ZooKeeper mode: two brokers on the session's ZooKeeper. Quorum mode: one broker
    that is its own one-voter metadata quorum."""
    if mode == "zookeeper":
        return await start_brokers(request.getfixturevalue("zk_hosts"), tmp_path, 2,
                                   **OPEN_USER_ADMIN)
    from twisted.internet import reactor

    from broker_core.broker import BrokerService

    cfg = broker_config(1, "", tmp_path / "broker-1", metadata_store="quorum",
                        quorum_voters=f"1@127.0.0.1:{free_port()}", cluster_id="users-test",
                        **OPEN_USER_ADMIN)
    broker = BrokerService(cfg, reactor=reactor)
    await broker.startService()
    return [broker]


def bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port.getHost().port}"


@pytest_twisted.ensureDeferred
async def test_confluent_admin_alters_and_describes_users_in_both_modes(mode, request,
                                                                         tmp_path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    brokers = await _start(mode, request, tmp_path)
    try:
        admin_at, watcher = brokers[0], brokers[-1]

        def alter(alterations) -> dict:
            admin = AdminClient({"bootstrap.servers": bootstrap(admin_at)})
            out = {}
            for user, fut in admin.alter_user_scram_credentials(
                    alterations, request_timeout=15).items():
                try:
                    fut.result(timeout=30)
                    out[user] = "NONE"
                except KafkaException as e:
                    out[user] = e.args[0].name()
            return out

        def describe(users=None):
            admin = AdminClient({"bootstrap.servers": bootstrap(admin_at)})
            got = admin.describe_user_scram_credentials(users, request_timeout=15)
            if users is None:
                return {u: sorted((str(c.mechanism), c.iterations) for c in d.scram_credential_infos)
                        for u, d in got.result(timeout=30).items()}
            out = {}
            for user, fut in got.items():
                try:
                    d = fut.result(timeout=30)
                    out[user] = sorted((str(c.mechanism), c.iterations)
                                       for c in d.scram_credential_infos)
                except KafkaException as e:
                    out[user] = e.args[0].name()
            return out

        sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        got = await threads.deferToThread(alter, [
            UserScramCredentialUpsertion("alice", sha512, b"alice-secret"),
            UserScramCredentialUpsertion("alice", sha256, b"alice-secret"),
            UserScramCredentialUpsertion("bob", sha512, b"bob-secret", b"0123456789abcdef"),
        ])
        assert got == {"alice": "NONE", "bob": "NONE"}
        # Every broker's cache (the other broker's in ZooKeeper mode) now checks the passwords.
        await eventually(lambda: watcher.users.check_plain("alice", "alice-secret")
                         and watcher.users.check_plain("bob", "bob-secret"), what="the cache")
        assert not watcher.users.check_plain("alice", "bob-secret")

        everyone = await threads.deferToThread(describe)
        assert everyone == {
            "alice": sorted([("ScramMechanism.SCRAM_SHA_256", 4096),
                             ("ScramMechanism.SCRAM_SHA_512", 8192)]),
            "bob": [("ScramMechanism.SCRAM_SHA_512", 8192)]}
        named = await threads.deferToThread(describe, ["bob", "nobody"])
        assert named == {"bob": [("ScramMechanism.SCRAM_SHA_512", 8192)],
                         "nobody": "RESOURCE_NOT_FOUND"}

        # Bad cases: each refused with Kafka's code, and nothing changes.
        got = await threads.deferToThread(alter, [
            UserScramCredentialUpsertion("__sluice_broker", sha512, b"steal"),
            UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"pw"),
            UserScramCredentialUpsertion(
                "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100_000), b"pw"),
            UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256),
        ])
        assert got == {"__sluice_broker": "UNACCEPTABLE_CREDENTIAL",
                       "carol": "UNACCEPTABLE_CREDENTIAL", "dave": "UNACCEPTABLE_CREDENTIAL",
                       "bob": "RESOURCE_NOT_FOUND"}
        assert await threads.deferToThread(describe) == everyone
        assert watcher.users.check_plain("bob", "bob-secret")

        # The same user and mechanism twice (confluent-kafka refuses to send it): raw request.
        salt = b"s" * 16
        up = {"name": "erin", "mechanism": 2, "iterations": 4096, "salt": salt,
              "salted_password": salted_password("SCRAM-SHA-512", "pw", salt, 4096)}
        resp = await call(admin_at, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                          {"deletions": [], "upsertions": [up, up]})
        assert [(r.user, r.error_code) for r in resp.results] == [
            ("erin", ErrorCode.DUPLICATE_RESOURCE)]
        assert resp.results[0].error_message

        got = await threads.deferToThread(alter, [
            UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)])
        assert got == {"alice": "NONE"}
        await eventually(lambda: "alice" not in watcher.users.users(), what="alice removed")
        assert not watcher.users.check_plain("alice", "alice-secret")
    finally:
        await stop_brokers(brokers)


@pytest_twisted.ensureDeferred
async def test_without_acls_an_anonymous_client_cannot_manage_users(zk_hosts, tmp_path):
    """The default cluster (no authorizer, no super users): an anonymous client can neither
    set a user's password (then log in as that user) nor list the users; nothing changes."""
    (broker,) = await start_brokers(zk_hosts, tmp_path, 1)
    try:
        salt = b"s" * 16
        up = {"name": "mallory", "mechanism": 2, "iterations": 4096, "salt": salt,
              "salted_password": salted_password("SCRAM-SHA-512", "pw", salt, 4096)}
        resp = await call(broker, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                          {"deletions": [], "upsertions": [up]})
        assert [(r.user, r.error_code) for r in resp.results] == [
            ("mallory", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
        resp = await call(broker, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert list(resp.results) == []
        assert not broker.users.users()
        assert await describe_credentials(broker.store, None) == []  # the store itself
    finally:
        await stop_brokers([broker])


@pytest_twisted.ensureDeferred
async def test_sluice_users_add_list_remove(mode, request, tmp_path, capsys):
    brokers = await _start(mode, request, tmp_path)
    try:
        server = ["--bootstrap-server", bootstrap(brokers[0])]
        secret = tmp_path / "alice.password"
        secret.write_text("s3cret-from-a-file\n")

        def sluice(*argv: str) -> tuple[int, str, str]:
            code = cli.main(list(argv))
            out, err = capsys.readouterr()
            return code, out, err

        code, out, _ = await threads.deferToThread(
            sluice, "users", "add", "alice", *server, "--mechanism", "SCRAM-SHA-512",
            "--mechanism", "SCRAM-SHA-256", "--iterations", "8192",
            "--password-file", str(secret))
        assert code == 0, out
        await eventually(lambda: brokers[-1].users.check_plain("alice", "s3cret-from-a-file"),
                         what="alice's password")
        code, out, _ = await threads.deferToThread(sluice, "users", "list", *server)
        assert code == 0
        assert out.split("\n")[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
        assert [line.split() for line in out.strip().split("\n")[1:]] == [
            ["alice", "SCRAM-SHA-256", "8192"], ["alice", "SCRAM-SHA-512", "8192"]]
        assert "s3cret" not in out and "salt" not in out

        # Refusals: reserved name (before any password is read), iterations out of range.
        code, _, err = await threads.deferToThread(
            sluice, "users", "add", "__sluice_broker", *server, "--password-file", str(secret))
        assert code == 2 and "reserved" in err
        code, _, err = await threads.deferToThread(
            sluice, "users", "add", "bob", *server, "--iterations", "100",
            "--password-file", str(secret))
        assert code == 2 and "iterations" in err
        code, _, err = await threads.deferToThread(sluice, "users", "remove", "nobody", *server)
        assert code == 1 and err == "sluice: RESOURCE_NOT_FOUND: user 'nobody': no SCRAM credential\n"

        code, out, _ = await threads.deferToThread(sluice, "users", "remove", "alice", *server)
        assert code == 0 and "SCRAM-SHA-256" in out and "SCRAM-SHA-512" in out
        await eventually(lambda: not brokers[-1].users.users(), what="alice removed")
        code, out, _ = await threads.deferToThread(sluice, "users", "list", *server)
        assert code == 0 and out.strip().split("\n") == [out.split("\n")[0]]
    finally:
        await stop_brokers(brokers)


def sluice_process(*argv: str, password_input: str | None = None
                   ) -> subprocess.CompletedProcess:
    """``sluice`` in its own process (``--zookeeper`` runs a reactor of its own), in a new
    session: with no controlling terminal the password prompt reads standard input."""
    return subprocess.run([sys.executable, "-m", "sluice_tools.cli", *argv],
                          input=password_input, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
                          start_new_session=True)


@pytest_twisted.ensureDeferred
async def test_sluice_users_through_zookeeper_before_any_broker_runs(zk_hosts, tmp_path):
    """The first user can be made before the cluster starts (Kafka's bootstrap habit), its
    password typed twice at the prompt; a broker started afterwards knows it."""
    added = await threads.deferToThread(
        sluice_process, "users", "add", "admin", "--zookeeper", zk_hosts,
        password_input="first-admin\nfirst-admin\n")
    assert added.returncode == 0, added.stderr
    assert "first-admin" not in added.stdout + added.stderr
    mistyped = await threads.deferToThread(
        sluice_process, "users", "add", "other", "--zookeeper", zk_hosts,
        password_input="one\ntwo\n")
    assert mistyped.returncode == 2 and "differ" in mistyped.stderr
    listed = await threads.deferToThread(sluice_process, "users", "list", "--zookeeper",
                                         zk_hosts)
    assert listed.returncode == 0, listed.stderr
    assert [line.split() for line in listed.stdout.strip().split("\n")[1:]] == [
        ["admin", "SCRAM-SHA-512", "4096"]]
    (broker,) = await start_brokers(zk_hosts, tmp_path, 1)
    try:
        assert broker.users.check_plain("admin", "first-admin")  # read before it listened
        assert not broker.users.check_plain("other", "one")
        # Removing every mechanism describes and deletes in one ZooKeeper session.
        removed = await threads.deferToThread(sluice_process, "users", "remove", "admin",
                                              "--zookeeper", zk_hosts)
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout == 'Removed the SCRAM-SHA-512 credential of user "admin".\n'
        await eventually(lambda: not broker.users.check_plain("admin", "first-admin"),
                         what="the broker forgets admin")
    finally:
        await stop_brokers([broker])
