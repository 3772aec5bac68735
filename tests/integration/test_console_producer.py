"""``sluice produce`` (the console producer), the real command in a subprocess against real
brokers: every line becomes one message, keys split at the separator, a line without the
separator stops the command with nothing of it or after it sent, and bad usage is refused
before anything is produced. Plus the line handling itself."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import pytest_twisted
from twisted.internet import threads

from sluice_tools.console_producer import _Failures, lines_of, split_line
from tests.support.cluster import ROOT, running_brokers
from tests.support.producer_harness import fetch_all, topic_ready


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 1)


def produce(bootstrap: str, *args: str, stdin: bytes) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sluice_tools.cli", "produce", "--bootstrap-server",
            bootstrap, *args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60, cwd=ROOT)


def bootstrap_of(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)


@pytest_twisted.ensureDeferred
async def test_each_line_is_one_message_with_its_key(brokers):
    await topic_ready(brokers, "lines")
    lines = b"a:1\r\nb:two:colons\n:no key\nc:\n\xff\xfe:binary\nlast:no newline"
    done = await threads.deferToThread(produce, bootstrap_of(brokers), "--topic", "lines",
                                       "--key-separator", ":", "--acks", "all", stdin=lines)
    assert done.returncode == 0, done.stderr
    got = [(r.key, r.value) for r in await fetch_all(brokers, "lines", 0)]
    assert got == [(b"a", b"1"), (b"b", b"two:colons"), (b"", b"no key"), (b"c", b""),
                   (b"\xff\xfe", b"binary"), (b"last", b"no newline")]


@pytest_twisted.ensureDeferred
async def test_without_a_separator_lines_are_values_and_empty_lines_count(brokers):
    await topic_ready(brokers, "values")
    done = await threads.deferToThread(produce, bootstrap_of(brokers), "--topic", "values",
                                       "--acks", "1", stdin=b"x\n\ny:z\n")
    assert done.returncode == 0, done.stderr
    got = [(r.key, r.value) for r in await fetch_all(brokers, "values", 0)]
    assert got == [(None, b"x"), (None, b""), (None, b"y:z")]


@pytest_twisted.ensureDeferred
async def test_a_line_without_the_separator_stops_the_command_unsent(brokers):
    await topic_ready(brokers, "strict")
    done = await threads.deferToThread(produce, bootstrap_of(brokers), "--topic", "strict",
                                       "--key-separator", "\t", stdin=b"k\tv\nnot keyed\nk2\tv2\n")
    assert done.returncode == 1
    assert b"line 2 has no key separator" in done.stderr
    got = [(r.key, r.value) for r in await fetch_all(brokers, "strict", 0)]
    assert got == [(b"k", b"v")]  # what came before was produced; nothing from line 2 on


@pytest_twisted.ensureDeferred
async def test_bad_usage_is_refused_before_anything_is_produced(brokers):
    await topic_ready(brokers, "usage")
    bootstrap = bootstrap_of(brokers)
    bad_acks = await threads.deferToThread(produce, bootstrap, "--topic", "usage",
                                           "--acks", "2", stdin=b"x\n")
    bad_key = await threads.deferToThread(produce, bootstrap, "--topic", "usage",
                                          "--producer-property", "linger.ms=soon",
                                          stdin=b"x\n")
    assert bad_acks.returncode == 2 and b"--acks" in bad_acks.stderr
    assert bad_key.returncode == 2 and b"linger.ms" in bad_key.stderr
    assert await fetch_all(brokers, "usage", 0) == []


def test_line_endings_are_removed_and_nothing_else():
    assert list(lines_of(io.BytesIO(b"a\r\nb\n\n c \r\r\nd"))) == [b"a", b"b", b"", b" c \r",
                                                                   b"d"]


def test_the_key_is_split_at_the_first_separator():
    assert split_line(b"k=v=w", b"=") == (b"k", b"v=w")
    assert split_line(b"k=v", None) == (None, b"k=v")
    assert split_line(b"kv", b"=") is None


def test_failures_are_reported_once_per_error_with_a_count_and_the_first_line():
    failures = _Failures()
    assert not failures
    failures.add(TimeoutError("no answer"), 3)
    failures.add(TimeoutError("no answer"), 7)
    failures.add(ValueError("too large"), 5)
    err = io.StringIO()
    failures.report(err)
    assert err.getvalue().splitlines() == [
        "sluice: 2 records not produced (first: line 3): TimeoutError: no answer",
        "sluice: 1 record not produced (first: line 5): ValueError: too large"]
