"""First message of a new single-member group: the time from a consumer's start to its first
message, this tree against an older revision, in one run.

Each round starts, per tree (the old one is ``--old-rev`` extracted with ``git archive`` into a
temp dir; the order alternates every round), a worker process with ``PYTHONPATH`` at that tree:
it starts a real ZooKeeper and ONE broker process from that tree (also the elected consumer
coordinator, default ``group.initial.rebalance.delay.ms`` and, where it exists,
``group.initial.rebalance.quiet.ms``), creates a topic of ``--partitions`` partitions holding one
message each (kcat), then ``--consumers`` times:

- ``BlockingConsumer`` in a fresh group: seconds from creating it to its first message
  (``next(iter(consumer))``), the figure of issue 20; the first one of each worker also pays
  the process's one-time costs (starting the reactor thread, the first connection, compiling
  the wire codecs it uses), so it is printed apart as well;
- the Twisted ``Consumer`` in a fresh group, its steps timed by its state changes: coordinator
  found (ClusterMetadata answered), registered (RegisterConsumer answered), assignment known
  (StartFetcher received, fetchers started), first message (the first ``get_many``).

Usage: python bench/first_message.py [--old-rev main] [--rounds 5] [--consumers 3]
       [--partitions 4]
Prints the median of every figure for old and new; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("coordinator found", "registered", "assignment known", "first message")


def _config(bootstrap: str, topic: str) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": f"first-{uuid.uuid4().hex[:8]}",
            "topics": {topic: 1}, "auto.offset.reset": "smallest",
            "auto.commit.enable": "false"}


def blocking_first(bootstrap: str, topic: str) -> float:
    from consumer_client.blocking_consumer import BlockingConsumer

    start = time.perf_counter()
    consumer = BlockingConsumer(_config(bootstrap, topic))
    next(iter(consumer))
    took = time.perf_counter() - start
    consumer.close()
    return took


def twisted_steps(bootstrap: str, topic: str) -> dict[str, float]:
    """Seconds from ``start()`` to each step of a Twisted ``Consumer`` in a new group."""
    from twisted.internet import defer

    from consumer_client.consumer import Consumer
    from consumer_client.membership import State
    from consumer_client.reactor_thread import ReactorThread

    rt = ReactorThread.get()
    names = {State.REGISTERING: "coordinator found", State.WAITING: "registered",
             State.FETCHING: "assignment known"}

    async def run() -> dict[str, float]:
        out: dict[str, float] = {}
        consumer = Consumer(_config(bootstrap, topic), reactor=rt.reactor)

        def changed(member: object) -> None:
            name = names.get(member.state)  # type: ignore[attr-defined]
            if name is not None and name not in out:
                out[name] = time.perf_counter() - start

        consumer.on_state_change(changed)
        start = time.perf_counter()
        consumer.start()
        await consumer.messages.get_many()
        out["first message"] = time.perf_counter() - start
        await consumer.close()
        return out

    return rt.call(lambda: defer.Deferred.fromCoroutine(run()))


def worker(args: argparse.Namespace) -> dict[str, list]:
    """One tree's figures (runs with PYTHONPATH at that tree)."""
    from tests.support.cluster import BrokerProcess
    from tests.support.zookeeper import ZooKeeperServer

    tmp = Path(tempfile.mkdtemp(prefix="first-message-"))
    zk = ZooKeeperServer()
    zk.start()
    broker = BrokerProcess(1, zk.hosts, tmp)
    try:
        broker.start()
        broker.wait_listening()
        topic = "first-message"
        subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                        "--bootstrap-server", broker.address, "--topic", topic,
                        "--partitions", str(args.partitions), "--replication-factor", "1"],
                       check=True, capture_output=True)
        for p in range(args.partitions):
            subprocess.run(["kcat", "-b", broker.address, "-P", "-t", topic, "-p", str(p)],
                           input=b"hello\n", check=True)
        out: dict[str, list] = {"blocking": [], "steps": []}
        for _ in range(args.consumers):
            out["blocking"].append(blocking_first(broker.address, topic))
            out["steps"].append(twisted_steps(broker.address, topic))
        return out
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run_worker(tree: Path, args: argparse.Namespace) -> dict[str, list]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           "--consumers", str(args.consumers), "--partitions", str(args.partitions)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-rev", default="main")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    sys.path.insert(0, str(ROOT))
    from bench.common import extract_revision

    old_tree = Path(tempfile.mkdtemp(prefix="first-message-old-"))
    try:
        extract_revision(ROOT, args.old_rev, old_tree)
        results: dict[str, dict[str, list]] = {"old": {"blocking": [], "steps": []},
                                               "new": {"blocking": [], "steps": []}}
        for r in range(args.rounds):
            order = [("old", old_tree), ("new", ROOT)] if r % 2 == 0 else \
                [("new", ROOT), ("old", old_tree)]
            for name, tree in order:
                got = run_worker(tree, args)
                for k in results[name]:
                    results[name][k].extend(got[k])
                print(f"  round {r + 1} {name}: BlockingConsumer first message "
                      + ", ".join(f"{x:.3f}" for x in got["blocking"]) + " s", flush=True)
        print(f"new single-member group, one broker (also the coordinator), "
              f"{args.partitions} partitions; median of {args.rounds} rounds x "
              f"{args.consumers} consumers, old = {args.old_rev}")
        print(f"{'seconds from start to':34}{'old':>8}{'new':>8}")
        per = args.consumers
        rows = [("first message (BlockingConsumer)",
                 [statistics.median(results[n]["blocking"]) for n in ("old", "new")]),
                ("  the first one of a process",
                 [statistics.median(results[n]["blocking"][::per]) for n in ("old", "new")])]
        rows += [(f"{step} (Consumer)",
                  [statistics.median(s[step] for s in results[n]["steps"])
                   for n in ("old", "new")]) for step in STEPS]
        for label, (old, new) in rows:
            print(f"{label:34}{old:8.3f}{new:8.3f}")
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)


if __name__ == "__main__":
    main()
