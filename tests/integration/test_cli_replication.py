"""``sluice reassign`` and ``sluice elect-leaders``, run as real subprocesses against three broker
processes, through ``--zookeeper`` and through ``--bootstrap-server`` (the brokers' Kafka APIs)
in ZooKeeper mode, and through ``--bootstrap-server`` in quorum mode (no ZooKeeper there): a
reassignment started, verified and completed; bad files and bad broker ids refused with one
line; a second reassignment refused while one runs; cancel with nothing to cancel; a SIGTERM'd
broker hands its leadership over (controlled shutdown) and ``elect-leaders`` gives it back once
it has returned."""

from __future__ import annotations

import json
import signal
import uuid

import pytest

from tests.support.cli_runs import describe, eventually, ok, sluice
from tests.support.procs import ProcessCluster

EXTRA = {"replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "100",
         "replica.fetch.backoff.ms": "100", "controlled.shutdown.retry.backoff.ms": "200"}


@pytest.fixture(scope="module")
def cluster(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts,
                       tmp_path_factory.mktemp(f"cli-repl-{request.param}"), size=3,
                       extra=EXTRA, quorum=quorum)
    try:
        c.start()
        c.wait_registered()
        yield c
    finally:
        c.stop()


#: How the tool reaches the cluster in each metadata mode: through its ZooKeeper or a broker
#: (a quorum-mode cluster has no ZooKeeper, so that pair is not generated).
ROUTES = [("zookeeper", "--zookeeper"), ("zookeeper", "--bootstrap-server"),
          ("quorum", "--bootstrap-server")]


def pytest_generate_tests(metafunc):
    if "route" in metafunc.fixturenames:
        metafunc.parametrize(("cluster", "route"), ROUTES, indirect=["cluster"], scope="module",
                             ids=[f"{mode}{route}" for mode, route in ROUTES])
    elif "cluster" in metafunc.fixturenames:
        metafunc.parametrize("cluster", ["zookeeper", "quorum"], indirect=True, scope="module")


@pytest.fixture
def via(route, cluster) -> list[str]:
    """The tool's arguments for the route: the cluster's ZooKeeper, or a broker."""
    if route == "--zookeeper":
        return ["--zookeeper", cluster.zk_hosts]
    return ["--bootstrap-server", cluster.bootstrap]


def topic(prefix: str = "rep") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def led(via: list[str], name: str, partitions: int = 1) -> dict:
    def ready():
        d = describe(via, name)
        if len(d["partitions"]) == partitions and all(
                p["leader"] is not None for p in d["partitions"].values()):
            return d
        return None
    return eventually(ready, what=f"leaders of {name}")


def write_plan(tmp_path, entries) -> str:
    f = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}))
    return str(f)


def test_reassign_execute_then_verify_until_complete(via, tmp_path):
    name = topic()
    ok("topics", "create", "--topic", name, "--replication-factor", "2", *via)
    d = led(via, name)
    replicas = d["partitions"][0]["replicas"]
    target = [b for b in (1, 2, 3) if b not in replicas] + [replicas[0]]
    plan = write_plan(tmp_path, [(name, 0, target)])
    out = ok("reassign", "--reassignment-json-file", plan, "--execute", *via)
    assert "Current partition replica assignment" in out
    assert json.dumps(replicas, separators=(",", ":")) in out  # the rollback plan
    assert f"Successfully started partition reassignment for {name}-0" in out
    eventually(lambda: f"Reassignment of partition {name}-0 is complete." in ok(
        "reassign", "--reassignment-json-file", plan, "--verify", *via),
        timeout=30, what="reassignment complete")
    after = describe(via, name)["partitions"][0]
    assert after["replicas"] == target and sorted(after["isr"]) == sorted(target)
    out = ok("reassign", "--reassignment-json-file", plan, "--cancel", *via)
    assert out.strip() == "None of the specified partition reassignments are active."


@pytest.mark.parametrize(("entries", "message"), [
    ([("missing-topic", 0, [1])], "UNKNOWN_TOPIC_OR_PARTITION"),
    ([("{t}", 0, [1, 1])], "names a broker twice"),
    ([("{t}", 0, [1, 42])], "brokers [42] are not alive"),
    ([("{t}", 0, [])], "the replica list is empty"),
])
def test_reassign_bad_input_is_refused_with_one_line(via, tmp_path, entries, message):
    name = topic("bad")
    ok("topics", "create", "--topic", name, *via)
    led(via, name)
    before = describe(via, name)["partitions"][0]["replicas"]
    plan = write_plan(tmp_path, [(t.format(t=name), p, r) for t, p, r in entries])
    r = sluice("reassign", "--reassignment-json-file", plan, "--execute", *via)
    assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert describe(via, name)["partitions"][0]["replicas"] == before
    out = ok("reassign", "--reassignment-json-file", plan, "--verify", *via)
    assert "still in progress" not in out


def test_a_second_reassignment_waits_for_the_first(cluster, via, tmp_path):
    # A partition of a stopped broker cannot catch up on its new replica, so its move stays
    # in progress until the broker is back.
    name, other_topic = topic("slow"), topic("next")
    ok("topics", "create", "--topic", name, "--replication-factor", "1", *via)
    ok("topics", "create", "--topic", other_topic, "--replication-factor", "3", *via)
    replicas = led(via, name)["partitions"][0]["replicas"]
    led(via, other_topic)
    other = next(b for b in (1, 2, 3) if b not in replicas)
    cluster.brokers[replicas[0]].kill(signal.SIGKILL)
    try:
        first = write_plan(tmp_path, [(name, 0, [other])])
        ok("reassign", "--reassignment-json-file", first, "--execute", *via)
        out = ok("reassign", "--reassignment-json-file", first, "--verify", *via)
        assert f"Reassignment of partition {name}-0 is still in progress." in out
        second = write_plan(tmp_path, [(other_topic, 0, [other])])
        r = sluice("reassign", "--reassignment-json-file", second, "--execute", *via)
        assert r.returncode == 1 and "REASSIGNMENT_IN_PROGRESS" in r.stderr
        out = ok("reassign", "--reassignment-json-file", first, "--cancel", *via)
        assert out.strip() == f"Successfully cancelled partition reassignments for: {name}-0"
    finally:
        cluster.brokers[replicas[0]].start()
        cluster.brokers[replicas[0]].wait_listening()
    eventually(lambda: "still in progress" not in ok(
        "reassign", "--reassignment-json-file", first, "--verify", *via),
        timeout=40, what="the cancelled reassignment finished")
    assert describe(via, name)["partitions"][0]["replicas"] == replicas
    cluster.wait_registered()


def test_reassign_unreadable_file_is_bad_usage(via, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = sluice("reassign", "--reassignment-json-file", str(bad), "--verify", *via)
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_sigterm_hands_leadership_over_and_elect_leaders_gives_it_back(cluster, via):
    name = topic("pref")
    ok("topics", "create", "--topic", name, "--replication-factor", "3", *via)
    d = led(via, name)
    p0 = d["partitions"][0]
    preferred = p0["replicas"][0]
    assert p0["leader"] == preferred
    out = ok("elect-leaders", "--topic", name, "--partition", "0", *via)
    assert out.strip() == f"Valid replica already elected for partitions {name}-0"

    broker = cluster.brokers[preferred]
    broker.kill(signal.SIGTERM)  # a clean stop: controlled shutdown first
    assert "controlled shutdown of broker" in broker.log_text()
    assert f"controlled shutdown of broker {preferred} succeeded" in broker.log_text()
    moved = describe(via, name)["partitions"][0]
    assert moved["leader"] not in (None, preferred) and moved["epoch"] > p0["epoch"]

    broker.start()
    broker.wait_listening()
    eventually(lambda: preferred in describe(via, name)["partitions"][0]["isr"],
               timeout=40, what="restarted broker back in the ISR")
    out = ok("elect-leaders", "--election-type", "PREFERRED", "--all-topic-partitions", *via)
    # Other tests' partitions may have lost their preferred leaders too: look for ours.
    elected = "Successfully completed leader election (PREFERRED) for partitions "
    (line,) = [line for line in out.splitlines() if line.startswith(elected)]
    assert f"{name}-0" in line[len(elected):].split(", ")
    back = describe(via, name)["partitions"][0]
    assert back["leader"] == preferred and back["epoch"] > moved["epoch"]


def test_elect_leaders_unknown_partition_fails(via):
    r = sluice("elect-leaders", "--topic", "no-such-topic", "--partition", "0", *via)
    assert r.returncode == 1
    assert "Error completing leader election (PREFERRED) for partition: no-such-topic-0: " \
           "UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


def test_elect_leaders_unclean_reports_as_kafkas_tool(via):
    """``--election-type unclean`` (the election itself: tests/interop and
    tests/unit/test_unclean_election.py): a partition with a live leader needs nothing, an
    unknown one fails with the type named."""
    name = topic("unclean")
    ok("topics", "create", "--topic", name, "--replication-factor", "2", *via)
    led(via, name)
    out = ok("elect-leaders", "--election-type", "unclean", "--topic", name, "--partition", "0",
             *via)
    assert out.strip() == f"Valid replica already elected for partitions {name}-0"
    r = sluice("elect-leaders", "--election-type", "UNCLEAN", "--topic", "no-such-topic",
               "--partition", "0", *via)
    assert r.returncode == 1
    assert "Error completing leader election (UNCLEAN) for partition: no-such-topic-0: " \
           "UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


def test_elect_leaders_topic_needs_partition(via):
    r = sluice("elect-leaders", "--topic", "x", *via)
    assert r.returncode == 2 and "--topic needs --partition" in r.stderr


def test_delete_records_moves_the_log_start_and_refuses_past_the_end(cluster, tmp_path):
    from confluent_kafka import Producer

    name = topic("del")
    conn = ["--bootstrap-server", cluster.bootstrap]
    ok("topics", "create", "--topic", name, "--replication-factor", "3", *conn)
    led(conn, name)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce(name, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0

    def offsets_file(offset: int) -> str:
        f = tmp_path / f"offsets-{uuid.uuid4().hex[:6]}.json"
        f.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": name, "partition": 0, "offset": offset}]}))
        return str(f)

    out = ok("delete-records", "--offset-json-file", offsets_file(3), *conn)
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                f"partition: {name}-0\tlow_watermark: 3"]
    r = sluice("delete-records", "--offset-json-file", offsets_file(6), *conn)
    assert r.returncode == 1
    assert f"partition: {name}-0\terror: OFFSET_OUT_OF_RANGE" in r.stdout
    out = ok("delete-records", "--offset-json-file", offsets_file(-1), *conn)
    assert f"partition: {name}-0\tlow_watermark: 5" in out
