"""Pieces the benchmark scripts share."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_kcat_payload(path: Path, messages: int, size: int) -> tuple[int, float]:
    """Write whole thousands of ``size``-byte messages, one per line, for ``kcat -P -l``;
    return how many were written and their megabytes. kcat strips the newline, so each value
    is ``size - 1`` bytes plus the delimiter."""
    line = b"m" * (size - 1) + b"\n"
    with open(path, "wb") as f:
        for _ in range(messages // 10_000):
            f.write(line * 10_000)
    n = (messages // 10_000) * 10_000
    return n, n * size / (1 << 20)


def produce_round(conns: dict[int, Any], port_of: Callable[[int], int],
                  bodies: dict[int, dict], *, timeout: float,
                  on_error: Callable[[int, OSError], None] | None = None) -> dict[int, Any]:
    """One Produce request to each leader of ``bodies`` (leader id -> request body), all sent
    before any answer is read, over the kept-open connections in ``conns`` (opened here as
    needed, to 127.0.0.1 at ``port_of(leader)``). Returns leader id -> response for those that
    answered; a leader whose connection failed is dropped from ``conns`` (``on_error`` is told)
    and asked again next round."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    sent = []
    for leader, body in bodies.items():
        try:
            if leader not in conns:
                conns[leader] = BrokerConnection("127.0.0.1", port_of(leader), timeout=timeout)
            sent.append((leader, conns[leader].send(ApiKey.PRODUCE, body)))
        except OSError:
            conns.pop(leader, None)
    answers = {}
    for leader, pending in sent:
        try:
            answers[leader] = conns[leader].receive(pending)
        except OSError as e:
            if on_error is not None:
                on_error(leader, e)
            conns.pop(leader, None)
    return answers


def watch_deletion(kz: Any, path: str, now: Callable[[], float]
                   ) -> tuple[threading.Event, list[float]]:
    """Watch ``path`` with the kazoo client ``kz``: when it is deleted (a broker's registration,
    as its session expires) the returned event is set and ``now()`` is appended to the list."""
    deleted = threading.Event()
    at: list[float] = []

    def watch(data: bytes | None, _stat: object) -> bool | None:
        if data is None and not deleted.is_set():
            at.append(now())
            deleted.set()
            return False
        return None

    kz.DataWatch(path, watch)
    return deleted, at


def wait_full_isr(cluster: Any, topics: list[str], timeout: float = 120.0) -> None:
    """Until every partition of ``topics`` has a leader and an ISR of 3, as Metadata from the
    first broker of ``cluster`` (a ``ProcessCluster``, on its plaintext ``port``) says."""
    from broker_core.wire.apis import ApiKey
    from consumer_client.connection import BrokerConnection

    deadline = time.monotonic() + timeout
    port = next(iter(cluster.brokers.values())).port
    while True:
        try:
            with BrokerConnection("127.0.0.1", port, timeout=10) as c:
                md = c.request(ApiKey.METADATA, {"topics": [{"name": t} for t in topics],
                                                 "allow_auto_topic_creation": False})
            parts = [p for t in md.topics for p in t.partitions]
            if parts and all(p.leader_id >= 0 and len(p.isr_nodes) == 3 for p in parts):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {topics} not fully replicated after {timeout}s")
        time.sleep(0.2)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of ``topic``'s partitions' high watermarks (confluent-kafka, plaintext)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hw", "log_level": 2})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def process_cpu(pids: list[int]) -> float:
    """User + system CPU seconds used so far by the processes ``pids`` (all their threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        # Fields after the command name (which may hold spaces) start at "state" (field 3).
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def children_cpu() -> float:
    """User + system CPU seconds used so far by this process's waited-for children (a
    ``subprocess.run`` client such as kcat counts once it has exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def log_events(path: Path) -> list[dict[str, Any]]:
    """Every event of a broker's JSON log (``BrokerProcess.log_format = "json"``; a torn last
    record is skipped)."""
    from twisted.logger import eventsFromJSONLogFile

    try:
        with open(path) as f:
            return list(eventsFromJSONLogFile(f))
    except OSError:
        return []


def extract_revision(root: Path, rev: str, dest: Path, paths: tuple[str, ...] = ()) -> None:
    """The files of commit ``rev`` of the repository at ``root`` (only ``paths``, when given)
    into the existing directory ``dest``: ``git archive | tar -x``, so no worktree or index
    of ``root`` changes. The caller removes ``dest``."""
    import subprocess

    archive = subprocess.run(["git", "archive", rev, *paths], cwd=root, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
