"""``sluice acls add|list|remove``, the real console script in a subprocess, against a real
in-process broker with ``authorizer.enabled=true`` (through ``--bootstrap-server``, as a super
user) and through ``--zookeeper``; what it adds the broker enforces, what it removes the
broker forgets; bad usage exits 2 with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from broker_core.security.acl import AclOperation, ResourceType
from tests.support.cluster import eventually, running_brokers

SLUICE = Path(sys.executable).with_name("sluice")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker(zk_hosts, tmp_path):
    # The command connects without credentials: make that principal the super user.
    for brokers in running_brokers(zk_hosts, tmp_path, 1, authorizer_enabled="true",
                                   super_users="User:ANONYMOUS"):
        yield brokers[0]


async def sluice(*args: str) -> subprocess.CompletedProcess:
    """The console script, off the reactor thread (the in-process broker must answer it)."""
    assert SLUICE.exists(), f"console script {SLUICE} is not installed"
    return await threads.deferToThread(
        subprocess.run, [str(SLUICE), *args], capture_output=True, text=True, cwd=ROOT,
        timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def server(broker) -> str:
    return f"127.0.0.1:{broker.port.getHost().port}"


def allowed(broker, principal: str, op: AclOperation, topic: str) -> bool:
    return broker.authorizer.authorize(principal, "10.1.1.1", op, ResourceType.TOPIC, topic)


@pytest_twisted.ensureDeferred
async def test_add_list_remove_through_a_broker(broker):
    r = await sluice("acls", "add", "--bootstrap-server", server(broker),
                     "--allow-principal", "User:alice", "--operation", "Read",
                     "--operation", "describe", "--topic", "fin-",
                     "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert "Adding ACLs: 2" in r.stdout
    r = await sluice("acls", "add", "--bootstrap-server", server(broker),
                     "--deny-principal", "User:bob", "--deny-host", "10.1.1.1",
                     "--operation", "Write", "--topic", "orders")
    assert r.returncode == 0, r.stderr
    await eventually(lambda: allowed(broker, "User:alice", AclOperation.READ, "fin-q3"),
                     what="alice's prefixed READ at the broker")
    assert not allowed(broker, "User:alice", AclOperation.WRITE, "fin-q3")

    r = await sluice("acls", "list", "--bootstrap-server", server(broker))
    assert r.returncode == 0, r.stderr
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=fin-, "
            "patternType=PREFIXED)`:") in r.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    assert "(principal=User:bob, host=10.1.1.1, operation=WRITE, permissionType=DENY)" \
        in r.stdout
    r = await sluice("acls", "list", "--bootstrap-server", server(broker),
                     "--principal", "User:bob")
    assert "User:alice" not in r.stdout and "User:bob" in r.stdout
    # MATCH lists what covers one topic: the prefixed pattern, not the other topic's.
    r = await sluice("acls", "list", "--bootstrap-server", server(broker), "--topic",
                     "fin-q3", "--resource-pattern-type", "match")
    assert "name=fin-," in r.stdout and "orders" not in r.stdout

    r = await sluice("acls", "remove", "--bootstrap-server", server(broker),
                     "--topic", "fin-", "--resource-pattern-type", "prefixed",
                     "--operation", "Read")
    assert r.returncode == 0, r.stderr
    assert "Removed ACLs: 1" in r.stdout
    await eventually(lambda: not allowed(broker, "User:alice", AclOperation.READ, "fin-q3"),
                     what="the removal at the broker")
    assert allowed(broker, "User:alice", AclOperation.DESCRIBE, "fin-q3")


@pytest_twisted.ensureDeferred
async def test_through_zookeeper_the_broker_sees_the_same_acls(broker, zk_hosts):
    r = await sluice("acls", "add", "--zookeeper", zk_hosts, "--allow-principal", "User:carol",
                     "--topic", "*")
    assert r.returncode == 0, r.stderr
    await eventually(lambda: allowed(broker, "User:carol", AclOperation.DELETE, "any"),
                     what="carol's ALL on every topic at the broker")
    r = await sluice("acls", "list", "--bootstrap-server", server(broker))
    assert "(principal=User:carol, host=*, operation=ALL, permissionType=ALLOW)" in r.stdout
    r = await sluice("acls", "remove", "--zookeeper", zk_hosts, "--principal", "User:carol",
                     "--topic", "*")
    assert "Removed ACLs: 1" in r.stdout
    await eventually(lambda: not allowed(broker, "User:carol", AclOperation.DELETE, "any"),
                     what="the removal at the broker")


@pytest_twisted.ensureDeferred
async def test_bad_usage_is_one_line_and_exit_2(broker):
    for args, message in [
        (["--allow-principal", "alice", "--topic", "t"], "TYPE:NAME"),
        (["--allow-principal", "User:a"], "name a resource"),
        (["--topic", "t"], "name a principal"),
        (["--allow-principal", "User:a", "--allow-host", "example.com", "--topic", "t"],
         "neither '*' nor an IP"),
        (["--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
         "unknown operation"),
    ]:
        r = await sluice("acls", "add", "--bootstrap-server", server(broker), *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr, (args, r.stderr)
    assert broker.authorizer.bindings() == []
