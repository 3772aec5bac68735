"""The ``sluice`` admin command, run as a real subprocess against a real three-broker cluster
(broker processes under ``twist``, in their own chroot of the session's ZooKeeper), through both
``--bootstrap-server`` and ``--zookeeper``: topic create / list / describe / add-partitions /
delete, cluster describe, and the exit codes and one-line messages for bad input and unreachable
servers. Plus unit tests of the argument parser."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from typing import Any

import pytest

from sluice_tools import cli
from tests.support.cli_runs import (
    ROOT,
    SLUICE,
    describe,
    eventually,
    ok,
    one_line_error,
    parse_describe,
    sluice,
)
from tests.support.cluster import free_port
from tests.support.procs import ProcessCluster

MODES = ["bootstrap", "zookeeper"]


# -- helpers -----------------------------------------------------------------------------------







def new_topic_name(prefix: str = "cli") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"






def parse_cluster(out: str) -> dict[str, Any]:
    result: dict[str, Any] = {"brokers": {}}
    for line in out.splitlines():
        if line.startswith("\tBroker: "):
            fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
            result["brokers"][int(fields["Broker"])] = fields["Address"]
        elif line.startswith("Controller: "):
            result["controller"] = line.split(": ", 1)[1]
        elif line.startswith("ControllerEpoch: "):
            result["epoch"] = line.split(": ", 1)[1]
        elif line.startswith("Brokers: "):
            result["count"] = int(line.split(": ", 1)[1])
    return result


def zk_read(cluster: ProcessCluster, path: str) -> bytes:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_hosts)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(path)
        return data
    finally:
        zk.stop()
        zk.close()


# -- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory, unreachable_zookeeper):
    """Three broker processes (ids 1..3) in a fresh ZooKeeper chroot, shared by this module.

    (It asks for ``unreachable_zookeeper`` only to start that slow command first.)"""
    c = ProcessCluster(zookeeper_server.hosts, tmp_path_factory.mktemp("cli-cluster"), size=3)
    try:
        c.start()
        c.wait_registered()
        yield c
    finally:
        c.stop()


@pytest.fixture(params=MODES)
def conn(request, cluster) -> list[str]:
    """The connection flags of one mode."""
    if request.param == "bootstrap":
        return ["--bootstrap-server", cluster.bootstrap]
    return ["--zookeeper", cluster.zk_hosts]


def list_topics(conn: list[str]) -> list[str]:
    return ok("topics", "list", *conn).splitlines()




def describe_when_led(conn: list[str], topic: str, count: int) -> dict[str, Any]:
    """``describe`` once the topic has ``count`` partitions, every one with a leader."""
    def ready():
        d = describe(conn, topic)
        if d["count"] == count and len(d["partitions"]) == count and all(
                p["leader"] is not None for p in d["partitions"].values()):
            return d
        return None
    return eventually(ready, what=f"{count} led partitions of {topic}")


def create(conn: list[str], topic: str, partitions: int = 1, *extra: str) -> None:
    out = ok("topics", "create", "--topic", topic, "--partitions", str(partitions),
             "--replication-factor", "1", *extra, *conn)
    assert out.strip() == f'Created topic "{topic}".'


# -- topics ------------------------------------------------------------------------------------

def test_create_then_list_shows_topic(conn):
    topic = new_topic_name()
    assert topic not in list_topics(conn)
    create(conn, topic, 3, "--config", "retention.ms=60000")
    names = eventually(lambda: topic in list_topics(conn) and list_topics(conn),
                       what=f"{topic} in the listing")
    assert names == sorted(names)  # one name per line, sorted


def test_describe_shows_partitions_leaders_and_replicas(conn, cluster):
    topic = new_topic_name()
    create(conn, topic, 3)
    d = describe_when_led(conn, topic, 3)
    ids = set(cluster.brokers)
    assert d["rf"] == 1
    assert sorted(d["partitions"]) == [0, 1, 2]
    for p in d["partitions"].values():
        assert len(p["replicas"]) == 1 and set(p["replicas"]) <= ids
        assert p["leader"] in p["replicas"]  # with RF 1 the one replica leads
        assert p["isr"] == p["replicas"]
        assert p["epoch"] >= 0
    # three partitions over three brokers: each broker holds one of them
    assert sorted(r for p in d["partitions"].values() for r in p["replicas"]) == sorted(ids)


def test_describe_all_topics_lists_each_topic(conn):
    a, b = new_topic_name("all-a"), new_topic_name("all-b")
    create(conn, a, 1)
    create(conn, b, 2)
    described = eventually(lambda: (d := parse_describe(ok("topics", "describe", *conn)))
                           and {a, b} <= set(d) and d, what="both topics described")
    assert described[a]["count"] == 1 and described[b]["count"] == 2
    assert set(described) <= set(list_topics(conn))


def test_create_stores_config_override(conn, cluster):
    """The override given to ``create`` in either mode is stored (read back via ZooKeeper)."""
    topic = new_topic_name()
    create(conn, topic, 2, "--config", "retention.ms=60000")
    d = describe(["--zookeeper", cluster.zk_hosts], topic)
    assert d["configs"] == {"retention.ms": "60000"}


@pytest.mark.parametrize("mode", ["bootstrap", "zookeeper"])
def test_describe_shows_config_override(mode, cluster):
    conn = (["--bootstrap-server", cluster.bootstrap] if mode == "bootstrap"
            else ["--zookeeper", cluster.zk_hosts])
    topic = new_topic_name()
    create(["--zookeeper", cluster.zk_hosts], topic, 1, "--config", "retention.ms=60000")
    d = describe_when_led(conn, topic, 1)
    assert d["configs"] == {"retention.ms": "60000"}


def test_add_partitions_grows_partition_count(conn, cluster):
    topic = new_topic_name()
    create(conn, topic, 2)
    before = describe_when_led(conn, topic, 2)
    out = ok("topics", "add-partitions", "--topic", topic, "--partitions", "5", *conn)
    assert out.strip() == f'Topic "{topic}" now has 5 partitions.'
    after = describe_when_led(conn, topic, 5)
    assert sorted(after["partitions"]) == [0, 1, 2, 3, 4]
    # the existing partitions keep their replicas; new ones get live brokers at the same RF
    for p in (0, 1):
        assert after["partitions"][p]["replicas"] == before["partitions"][p]["replicas"]
    for p in (2, 3, 4):
        assert len(after["partitions"][p]["replicas"]) == 1
        assert set(after["partitions"][p]["replicas"]) <= set(cluster.brokers)


def test_delete_removes_topic(conn):
    topic = new_topic_name()
    create(conn, topic, 2)
    describe_when_led(conn, topic, 2)
    out = ok("topics", "delete", "--topic", topic, *conn)
    assert out.strip() == f'Topic "{topic}" is marked for deletion.'
    eventually(lambda: topic not in list_topics(conn), what=f"{topic} gone from the listing")
    r = sluice("topics", "describe", "--topic", topic, *conn)
    assert r.returncode == 1 and topic in one_line_error(r)


def test_create_existing_topic_fails(conn):
    topic = new_topic_name()
    create(conn, topic, 1)
    r = sluice("topics", "create", "--topic", topic, *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "TOPIC_ALREADY_EXISTS" in line and topic in line


def test_replication_factor_above_broker_count_fails(conn):
    topic = new_topic_name()
    r = sluice("topics", "create", "--topic", topic, "--replication-factor", "4", *conn)
    assert r.returncode == 1
    assert "INVALID_REPLICATION_FACTOR" in one_line_error(r)
    assert topic not in list_topics(conn)


# -- cluster -----------------------------------------------------------------------------------

def test_cluster_describe_zookeeper(cluster):
    out = parse_cluster(ok("cluster", "describe", "--zookeeper", cluster.zk_hosts))
    assert out["count"] == 3
    assert out["brokers"] == {i: b.address for i, b in cluster.brokers.items()}
    assert int(out["controller"]) in cluster.brokers
    # the epoch printed is the one in ZooKeeper, and the controller is the registered one
    assert int(out["epoch"]) == int(zk_read(cluster, "/controller_epoch"))
    assert int(out["epoch"]) >= 1
    assert f'"brokerid":{out["controller"]}' in zk_read(cluster, "/controller").decode() \
        .replace(" ", "")


def test_cluster_describe_bootstrap(cluster):
    out = parse_cluster(ok("cluster", "describe", "--bootstrap-server", cluster.bootstrap))
    assert out["count"] == 3
    assert out["brokers"] == {i: b.address for i, b in cluster.brokers.items()}
    assert int(out["controller"]) in cluster.brokers
    # Metadata carries no controller epoch; the command says where to find it
    assert out["epoch"] == "unknown (use --zookeeper)"
    zk_view = parse_cluster(ok("cluster", "describe", "--zookeeper", cluster.zk_hosts))
    assert out["controller"] == zk_view["controller"]


# -- failed operations: exit 1, one line on stderr ---------------------------------------------

@pytest.mark.parametrize("action", ["describe", "delete"])
def test_unknown_topic_fails_with_one_line(conn, action):
    topic = new_topic_name("missing")
    r = sluice("topics", action, "--topic", topic, *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line and topic in line
    assert r.stdout == ""


def test_add_partitions_to_unknown_topic_fails(conn):
    topic = new_topic_name("missing")
    r = sluice("topics", "add-partitions", "--topic", topic, "--partitions", "3", *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line and topic in line


@pytest.mark.parametrize("name", ["bad!name", "..", "x" * 250])
def test_invalid_topic_name_fails(conn, name):
    r = sluice("topics", "create", "--topic", name, *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "INVALID_TOPIC_EXCEPTION" in line
    assert "topic name" in line
    assert name not in list_topics(conn)


@pytest.mark.parametrize("partitions", ["2", "3"])  # fewer than, and equal to, the current 3
def test_add_partitions_not_larger_than_current_fails(conn, partitions):
    topic = new_topic_name()
    create(conn, topic, 3)
    describe_when_led(conn, topic, 3)
    r = sluice("topics", "add-partitions", "--topic", topic, "--partitions", partitions, *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "INVALID_PARTITIONS" in line and "3 partitions" in line
    assert describe(conn, topic)["count"] == 3


def test_invalid_config_value_fails(conn):
    topic = new_topic_name()
    r = sluice("topics", "create", "--topic", topic, "--config", "retention.ms=soon", *conn)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "INVALID_CONFIG" in line and "retention.ms" in line
    assert topic not in list_topics(conn)


# -- unreachable servers -----------------------------------------------------------------------

class BackgroundRun:
    """A ``sluice`` command run in the background, with the time it took to exit."""

    def __init__(self, *args: str, timeout: float) -> None:
        self.timeout = timeout
        self.start = time.monotonic()
        self.proc = subprocess.Popen([str(SLUICE), *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.elapsed: float | None = None
        self.out = self.err = ""
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.out, self.err = self.proc.communicate()
        self.elapsed = time.monotonic() - self.start

    def result(self) -> subprocess.CompletedProcess:
        self._waiter.join(max(0.0, self.start + self.timeout - time.monotonic()))
        assert self.elapsed is not None, f"still running after {self.timeout}s"
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, self.out,
                                           self.err)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self._waiter.join(10)


@pytest.fixture(scope="module")
def unreachable_zookeeper():
    """``topics list`` against a ZooKeeper port nothing listens on. Started in the background
    by the ``cluster`` fixture, so its connect timeout overlaps the cluster's start."""
    hosts = f"127.0.0.1:{free_port()}"
    run = BackgroundRun("topics", "list", "--zookeeper", hosts, timeout=45)
    try:
        yield hosts, run
    finally:
        run.close()


def test_unreachable_zookeeper_fails_clearly_in_bounded_time(unreachable_zookeeper):
    hosts, run = unreachable_zookeeper
    r = run.result()  # fails unless the command exited within its 45 s bound
    assert r.returncode != 0
    last = r.stderr.splitlines()[-1]
    assert last.startswith("sluice: ") and "could not reach ZooKeeper" in last and hosts in last
    assert r.stdout == ""


def test_unreachable_zookeeper_error_is_one_line(unreachable_zookeeper):
    _, run = unreachable_zookeeper
    one_line_error(run.result())


def test_unreachable_bootstrap_server_fails_clearly():
    address = f"127.0.0.1:{free_port()}"
    r = sluice("topics", "list", "--bootstrap-server", address, timeout=30)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "could not connect" in line and address in line
    assert r.stdout == ""


def test_malformed_bootstrap_server_is_bad_usage():
    r = sluice("topics", "list", "--bootstrap-server", "no-port-here", timeout=30)
    assert r.returncode == 2
    line = one_line_error(r)
    assert "no-port-here" in line and "host:port" in line


# -- bad usage: exit 2 (argparse) ---------------------------------------------------------------

def usage_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines()[0].startswith("usage: sluice")
    return r.stderr.splitlines()[-1]


def test_config_without_equals_is_bad_usage(cluster):
    topic = new_topic_name()
    r = sluice("topics", "create", "--topic", topic, "--config", "retention.ms",
               "--zookeeper", cluster.zk_hosts)
    assert "--config expects key=value, got 'retention.ms'" in usage_error(r)
    assert topic not in list_topics(["--zookeeper", cluster.zk_hosts])


@pytest.mark.parametrize("action", ["create", "add-partitions"])
def test_zero_partitions_is_bad_usage(cluster, action):
    topic = new_topic_name()
    r = sluice("topics", action, "--topic", topic, "--partitions", "0",
               "--bootstrap-server", cluster.bootstrap)
    assert "--partitions must be at least 1, got 0" in usage_error(r)


def test_missing_connection_is_bad_usage():
    r = sluice("topics", "list")
    assert "one of the arguments --bootstrap-server --zookeeper is required" in usage_error(r)


# -- build_parser / main, in process (no reactor, no network) -------------------------------------

def test_parser_create_defaults():
    a = cli.build_parser().parse_args(["topics", "create", "--topic", "t", "--zookeeper", "h:1"])
    assert (a.area, a.action, a.topic) == ("topics", "create", "t")
    assert (a.partitions, a.replication_factor, a.config) == (1, 1, [])
    assert (a.zookeeper, a.bootstrap_server) == ("h:1", None)


def test_parser_repeated_config_keeps_everything_after_first_equals():
    a = cli.build_parser().parse_args([
        "topics", "create", "--topic", "t", "--bootstrap-server", "h:1", "--partitions", "4",
        "--replication-factor", "2", "--config", "retention.ms=60000",
        "--config", " cleanup.policy = compact ", "--config", "x=a=b"])
    assert a.partitions == 4 and a.replication_factor == 2
    assert a.config == [("retention.ms", "60000"), ("cleanup.policy", "compact"), ("x", "a=b")]


def test_parser_describe_topic_is_repeatable_and_optional():
    p = cli.build_parser()
    assert p.parse_args(["topics", "describe", "--zookeeper", "h:1"]).topic is None
    a = p.parse_args(["topics", "describe", "--zookeeper", "h:1", "--topic", "a", "--topic", "b"])
    assert a.topic == ["a", "b"]


@pytest.mark.parametrize("argv, message", [
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--config", "novalue"],
     "--config expects key=value"),
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--config", "=v"],
     "--config expects key=value"),
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--partitions", "0"],
     "--partitions must be at least 1"),
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--partitions", "-3"],
     "--partitions must be at least 1"),
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--partitions", "two"],
     "--partitions must be an integer"),
    (["topics", "create", "--topic", "t", "--zookeeper", "h:1", "--replication-factor", "0"],
     "--replication-factor must be at least 1"),
    (["topics", "add-partitions", "--topic", "t", "--zookeeper", "h:1"],
     "the following arguments are required: --partitions"),
    (["topics", "delete", "--zookeeper", "h:1"], "the following arguments are required: --topic"),
    (["topics", "list"], "one of the arguments --bootstrap-server --zookeeper is required"),
    (["topics", "list", "--zookeeper", "h:1", "--bootstrap-server", "h:2"], "not allowed with"),
    (["cluster", "describe"], "one of the arguments --bootstrap-server --zookeeper is required"),
    (["topics"], "the following arguments are required: action"),
    ([], "the following arguments are required: area"),
    (["brokers", "list"], "invalid choice"),
])
def test_main_bad_usage_returns_2(capsys, argv, message):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err.splitlines()[-1]
