"""``sluice reassign`` and ``sluice elect-leaders``, run as real subprocesses against three broker
processes: a reassignment started, verified and completed; bad files and bad broker ids refused
with one line; cancel with nothing to cancel; a SIGTERM'd broker hands its leadership over
(controlled shutdown) and ``elect-leaders`` gives it back once it has returned; bootstrap mode
says to use --zookeeper."""

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
def cluster(zookeeper_server, tmp_path_factory):
    c = ProcessCluster(zookeeper_server.hosts, tmp_path_factory.mktemp("cli-repl"), size=3,
                       extra=EXTRA)
    try:
        c.start()
        c.wait_registered()
        yield c
    finally:
        c.stop()


def zk(cluster) -> list[str]:
    return ["--zookeeper", cluster.zk_hosts]


def topic(prefix: str = "rep") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def led(cluster, name: str, partitions: int = 1) -> dict:
    def ready():
        d = describe(zk(cluster), name)
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


def test_reassign_execute_then_verify_until_complete(cluster, tmp_path):
    name = topic()
    ok("topics", "create", "--topic", name, "--replication-factor", "2", *zk(cluster))
    d = led(cluster, name)
    replicas = d["partitions"][0]["replicas"]
    target = [b for b in (1, 2, 3) if b not in replicas] + [replicas[0]]
    plan = write_plan(tmp_path, [(name, 0, target)])
    out = ok("reassign", "--reassignment-json-file", plan, "--execute", *zk(cluster))
    assert "Current partition replica assignment" in out
    assert json.dumps(replicas, separators=(",", ":")) in out  # the rollback plan
    assert f"Successfully started partition reassignment for {name}-0" in out
    eventually(lambda: f"Reassignment of partition {name}-0 is complete." in ok(
        "reassign", "--reassignment-json-file", plan, "--verify", *zk(cluster)),
        timeout=30, what="reassignment complete")
    after = describe(zk(cluster), name)["partitions"][0]
    assert after["replicas"] == target and sorted(after["isr"]) == sorted(target)
    out = ok("reassign", "--reassignment-json-file", plan, "--cancel", *zk(cluster))
    assert out.strip() == "None of the specified partition reassignments are active."


@pytest.mark.parametrize(("entries", "message"), [
    ([("missing-topic", 0, [1])], "UNKNOWN_TOPIC_OR_PARTITION"),
    ([("{t}", 0, [1, 1])], "names a broker twice"),
    ([("{t}", 0, [1, 42])], "brokers [42] are not alive"),
    ([("{t}", 0, [])], "the replica list is empty"),
])
def test_reassign_bad_input_is_refused_with_one_line(cluster, tmp_path, entries, message):
    name = topic("bad")
    ok("topics", "create", "--topic", name, *zk(cluster))
    plan = write_plan(tmp_path, [(t.format(t=name), p, r) for t, p, r in entries])
    r = sluice("reassign", "--reassignment-json-file", plan, "--execute", *zk(cluster))
    assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_reassign_unreadable_file_is_bad_usage(cluster, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = sluice("reassign", "--reassignment-json-file", str(bad), "--verify", *zk(cluster))
    assert r.returncode == 2 and "not valid JSON" in r.stderr


@pytest.mark.parametrize("argv", [
    ["reassign", "--reassignment-json-file", "PLAN", "--execute"],
    ["elect-leaders", "--all-topic-partitions"],
])
def test_bootstrap_mode_says_use_zookeeper(cluster, tmp_path, argv):
    plan = write_plan(tmp_path, [("t", 0, [1])])
    r = sluice(*[plan if a == "PLAN" else a for a in argv], "--bootstrap-server",
               cluster.bootstrap)
    assert r.returncode == 1 and "use --zookeeper" in r.stderr


def test_sigterm_hands_leadership_over_and_elect_leaders_gives_it_back(cluster):
    name = topic("pref")
    ok("topics", "create", "--topic", name, "--replication-factor", "3", *zk(cluster))
    d = led(cluster, name)
    p0 = d["partitions"][0]
    preferred = p0["replicas"][0]
    assert p0["leader"] == preferred
    out = ok("elect-leaders", "--topic", name, "--partition", "0", *zk(cluster))
    assert out.strip() == f"Valid replica already elected for partitions {name}-0"

    broker = cluster.brokers[preferred]
    broker.kill(signal.SIGTERM)  # a clean stop: controlled shutdown first
    assert "controlled shutdown of broker" in broker.log_text()
    assert f"controlled shutdown of broker {preferred} succeeded" in broker.log_text()
    moved = describe(zk(cluster), name)["partitions"][0]
    assert moved["leader"] not in (None, preferred) and moved["epoch"] > p0["epoch"]

    broker.start()
    broker.wait_listening()
    eventually(lambda: preferred in describe(zk(cluster), name)["partitions"][0]["isr"],
               timeout=40, what="restarted broker back in the ISR")
    out = ok("elect-leaders", "--election-type", "PREFERRED", "--all-topic-partitions",
             *zk(cluster))
    assert f"Successfully completed leader election (PREFERRED) for partitions {name}-0" in out
    back = describe(zk(cluster), name)["partitions"][0]
    assert back["leader"] == preferred and back["epoch"] > moved["epoch"]


def test_elect_leaders_unknown_partition_fails(cluster):
    r = sluice("elect-leaders", "--topic", "no-such-topic", "--partition", "0", *zk(cluster))
    assert r.returncode == 1
    assert "Error completing leader election (PREFERRED) for partition: no-such-topic-0: " \
           "UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


def test_elect_leaders_topic_needs_partition(cluster):
    r = sluice("elect-leaders", "--topic", "x", *zk(cluster))
    assert r.returncode == 2 and "--topic needs --partition" in r.stderr
