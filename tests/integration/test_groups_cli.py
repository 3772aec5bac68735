"""``sluice groups list|describe|reset-offsets|delete`` against real brokers and a real Sluice
group: members, ownership, current offsets and lag as the partitions' leaders report them; a
reset (dry run, then written) and a delete once the group has no member, refused before."""

from __future__ import annotations

import contextlib
import io

import pytest
import pytest_twisted
from twisted.internet import reactor, threads

from consumer_client.consumer import Consumer, ConsumerConfig, State
from sluice_tools import cli
from tests.support.cluster import (
    coordinates,
    eventually,
    known_coordinator,
    running_brokers,
    shard_service,
)
from tests.support.consumer_harness import fill, ready_topic, take


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    # One coordinator shard: the groups CLI finds the coordinator with ClusterMetadata v0,
    # which names one only when the cluster has a single shard.
    yield from running_brokers(zk_hosts, tmp_path, 2, group_initial_rebalance_delay_ms="200",
                               group_coordinator_shards="1",
                               group_min_session_timeout_ms="1000",
                               rebalance_backoff_ms="200", offsets_commit_interval_ms="200")


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


@pytest_twisted.ensureDeferred
async def test_groups_list_and_describe_show_members_offsets_and_lag(brokers, capsys):
    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    consumer = Consumer(ConsumerConfig.create(
        bootstrap_servers=bootstrap, group_id="billing", consumer_id="c1", topics={"t": 1},
        session_timeout_ms=1500, fetch_max_wait_ms=100, auto_offset_reset="smallest"),
        reactor=reactor)
    consumer.start()
    try:
        await eventually(lambda: consumer.state is State.FETCHING, timeout=30, what="fetching")
        got = await take(consumer, 20)
        assert len(got) == 20
        # with 2 x 10 consumed, the next Ping (every 0.5 s) reports offsets 10 and 10
        await eventually(lambda: _rows_are(bootstrap, [["t", "0", "10", "10", "0"],
                                                       ["t", "1", "10", "10", "0"]]),
                         timeout=15, what="describe reporting offsets 10/10, lag 0")
        for p in range(2):
            await fill(brokers, "t", p, 5)  # the log end moves on; the lag follows below
        code, out = await threads.deferToThread(_run, "groups", "list", "--bootstrap-server",
                                                bootstrap)
        assert code == 0
        assert [line.split() for line in out.splitlines()[1:]] == [
            ["billing", "sluice", "stable", "1"]]
        code, out = await threads.deferToThread(_run, "groups", "describe",
                                                "--bootstrap-server", bootstrap,
                                                "--group", "billing")
        assert code == 0, out
        assert "Group: billing\tKind: sluice\tState: stable" in out and "Members: 1" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith("t\t")]
        assert [r[1] for r in rows] == ["0", "1"]
        assert all(r[5] == "c1-0" for r in rows)  # the owning stream
        assert all(int(r[3]) == 15 for r in rows)  # log end offset after the refill
        assert all(int(r[4]) == int(r[3]) - int(r[2]) for r in rows)  # lag = end - current
        # Neither reset nor deleted while it has a member; nothing changes.
        code, _ = await threads.deferToThread(_run, "groups", "reset-offsets",
                                              "--bootstrap-server", bootstrap, "--group",
                                              "billing", "--topic", "t", "--to-earliest",
                                              "--execute")
        assert code == 1 and "has 1 active member" in capsys.readouterr().err
        code, _ = await threads.deferToThread(_run, "groups", "delete", "--bootstrap-server",
                                              bootstrap, "--group", "billing")
        assert code == 1 and "billing: NON_EMPTY_GROUP" in capsys.readouterr().err
    finally:
        await consumer.close()

    # The member gone (and the rebalance that follows done), the offsets can be reset:
    # a dry run first, then the same plan written.
    coordinator = next(shard_service(b, "billing") for b in brokers
                       if coordinates(b, "billing"))
    await eventually(lambda: (g := coordinator.registries.groups.get("billing")) is not None
                     and not g.members and g.curr_rebalancer is None
                     and not g.rebalance_initiated, timeout=15, what="billing empty and idle")
    reset = ("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", "billing",
             "--topic", "t:1", "--shift-by", "-4")
    code, out = await threads.deferToThread(_run, *reset)
    assert code == 0, out
    assert [line.split() for line in out.splitlines()[1:]] == [
        ["billing", "t", "1", "10", "6"],
        ["Dry", "run:", "nothing", "written", "(add", "--execute", "to", "write", "these",
         "offsets)"]]
    assert await _rows_are(bootstrap, [["t", "0", "10", "15", "5"], ["t", "1", "10", "15", "5"]])
    code, out = await threads.deferToThread(_run, *reset, "--execute")
    assert code == 0 and "Dry run" not in out
    assert await _rows_are(bootstrap, [["t", "0", "10", "15", "5"], ["t", "1", "6", "15", "9"]])
    code, out = await threads.deferToThread(_run, "groups", "reset-offsets",
                                            "--bootstrap-server", bootstrap, "--group",
                                            "billing", "--topic", "t", "--to-latest",
                                            "--execute")
    assert code == 0
    assert await _rows_are(bootstrap, [["t", "0", "15", "15", "0"], ["t", "1", "15", "15", "0"]])
    # Deleted: gone from the list, its offsets with it.
    code, out = await threads.deferToThread(_run, "groups", "delete", "--bootstrap-server",
                                            bootstrap, "--group", "billing")
    assert (code, out) == (0, "Deleted group billing\n")
    code, out = await threads.deferToThread(_run, "groups", "list", "--bootstrap-server",
                                            bootstrap)
    assert code == 0 and "billing" not in out

    code, _ = await threads.deferToThread(_run, "groups", "describe", "--bootstrap-server",
                                          bootstrap, "--group", "no-such-group")
    err = capsys.readouterr().err
    assert code == 1 and "no-such-group" in err


def _rows_are(bootstrap: str, expected: list[list[str]]):
    def check() -> bool:
        code, out = _run("groups", "describe", "--bootstrap-server", bootstrap, "--group",
                         "billing")
        rows = [line.split("\t")[:5] for line in out.splitlines() if line.startswith("t\t")]
        return code == 0 and rows == expected
    return threads.deferToThread(check)


@pytest_twisted.ensureDeferred
async def test_console_consumer_group_prints_every_message_and_commits(brokers):
    import subprocess
    import sys

    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    argv = [sys.executable, "-m", "sluice_tools.cli", "consume", "--bootstrap-server",
            bootstrap, "--topic", "t", "--group", "console", "--members", "2",
            "--from-beginning", "--max-messages", "20", "--session-timeout-ms", "1500"]
    done = await threads.deferToThread(subprocess.run, argv, capture_output=True, text=True,
                                       timeout=60)
    assert done.returncode == 0, done.stderr
    values = done.stdout.splitlines()
    assert len(values) == 20 and len(set(values)) == 20
    assert "consumed 20 messages" in done.stderr
    # the members handed their final positions over as they left
    code, out = await threads.deferToThread(_run, "groups", "describe", "--bootstrap-server",
                                            bootstrap, "--group", "console")
    rows = [line.split("\t")[:3] for line in out.splitlines() if line.startswith("t\t")]
    assert code == 0 and rows == [["t", "0", "10"], ["t", "1", "10"]], out


@pytest_twisted.ensureDeferred
async def test_console_consumer_stops_at_exactly_max_messages_and_commits_only_those(brokers):
    """Fetches bring whole batches (here 20 records at once); --max-messages 3 prints and
    commits exactly 3 of them, not what happened to be fetched."""
    import subprocess
    import sys

    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    argv = [sys.executable, "-m", "sluice_tools.cli", "consume", "--bootstrap-server",
            bootstrap, "--topic", "t", "--group", "three", "--members", "2",
            "--from-beginning", "--max-messages", "3", "--session-timeout-ms", "1500"]
    done = await threads.deferToThread(subprocess.run, argv, capture_output=True, text=True,
                                       timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3, done.stdout
    assert "consumed 3 messages" in done.stderr
    code, out = await threads.deferToThread(_run, "groups", "describe", "--bootstrap-server",
                                            bootstrap, "--group", "three")
    committed = [int(line.split("\t")[2]) for line in out.splitlines()
                 if line.startswith("t\t") and line.split("\t")[2].isdigit()]
    assert code == 0 and sum(committed) == 3, out


def _consume(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "sluice_tools.cli", "consume", *args]


@pytest_twisted.ensureDeferred
async def test_console_consumer_of_a_missing_topic_exits_non_zero_naming_it(brokers):
    """It said nothing and printed 'consumed 0' after Ctrl-C; now it warns at once and gives
    up after default.api.timeout.ms (here 1 s, through --consumer-property)."""
    import subprocess

    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    # The group's coordinator elected first (shards are placed once the new brokers have been
    # quiet for a second): the only problem here is the missing topic.
    await eventually(lambda: all(known_coordinator(b, "lost") >= 0 for b in brokers),
                     what="the coordinator of lost's shard elected and known")
    argv = _consume("--bootstrap-server", bootstrap, "--topic", "missing", "--group", "lost",
                    "--session-timeout-ms", "1500",
                    "--consumer-property", "default.api.timeout.ms=1000")
    done = await threads.deferToThread(subprocess.run, argv, capture_output=True, text=True,
                                       timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    warned = [i for i, line in enumerate(lines)
              if line.endswith("subscribed topics 'missing' do not exist "
                               "(UNKNOWN_TOPIC_OR_PARTITION)")]
    failed = [i for i, line in enumerate(lines)
              if line == ("sluice: topic 'missing' does not exist (UNKNOWN_TOPIC_OR_PARTITION): "
                          "not created within default.api.timeout.ms=1000")]
    assert len(warned) == 1 and len(failed) == 1 and warned[0] < failed[0], done.stderr
    assert done.stdout == ""


def test_console_consumer_with_no_broker_exits_non_zero_naming_the_address():
    import subprocess

    from tests.support.cluster import free_port

    port = free_port()
    done = subprocess.run(_consume("--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t",
                                   "--group", "g", "--consumer-property",
                                   "default.api.timeout.ms=1000"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines()
              if line.startswith("sluice: could not join group 'g'")]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], done.stderr
