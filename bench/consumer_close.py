"""Consumer close: how long ``close()`` takes, for several session timeouts.

Starts a real ZooKeeper and ONE broker process on 127.0.0.1 (also the elected consumer
coordinator, ``group.initial.rebalance.delay.ms=200``), creates a topic of ``--partitions``
partitions (default 4) and writes ``--messages`` (default 100) to each. Then, per session
timeout (``--sessions``, default 6000,30000 ms) and ``--repeat`` rounds (default 5): two
``BlockingConsumer`` s with auto-commit join a fresh group, the first reads a message, and the
time of each member's ``close()`` is measured (the first leaves a group with another member,
which is rebalanced; the second leaves an empty group).

Before UnregisterConsumer a close with auto-commit waited for the coordinator's next Ping and
the one after it: up to 2/3 of the session timeout (4 s and 20 s here). With the leave it is one
round trip to the coordinator, whatever the session timeout; the figures show that.

Usage: python bench/consumer_close.py [--sessions 6000,30000] [--repeat 5] [--partitions 4]
Prints figures; asserts nothing beyond every close finishing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import BrokerProcess  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


def one_round(bootstrap: str, topic: str, session_ms: int) -> tuple[float, float]:
    from consumer_client.blocking_consumer import BlockingConsumer
    from consumer_client.membership import State

    group = f"close-{uuid.uuid4().hex[:8]}"
    members = [BlockingConsumer(bootstrap_servers=bootstrap, group_id=group,
                                consumer_id=f"{group}-{n}", topics={topic: 1},
                                session_timeout_ms=session_ms, auto_offset_reset="smallest")
               for n in ("a", "b")]
    for m in members:
        m.wait_for(State.FETCHING, timeout=60)
    if members[0].poll(30) is None:
        raise RuntimeError("the first member read nothing in 30 s")
    times = []
    for m in members:
        t = time.perf_counter()
        m.close()
        times.append(time.perf_counter() - t)
    return times[0], times[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="6000,30000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--messages", type=int, default=100)
    args = ap.parse_args()
    sessions = [int(s) for s in args.sessions.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    zk = ZooKeeperServer()
    zk.start()
    broker = BrokerProcess(1, zk.hosts, tmp, extra={"group.initial.rebalance.delay.ms": "200"})
    try:
        broker.start()
        broker.wait_listening()
        topic = "bench-close"
        subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                        "--bootstrap-server", broker.address, "--topic", topic,
                        "--partitions", str(args.partitions), "--replication-factor", "1"],
                       check=True, cwd=ROOT, capture_output=True)
        from consumer_client.blocking_producer import BlockingProducer

        with BlockingProducer(bootstrap_servers=broker.address) as producer:
            for p in range(args.partitions):
                for i in range(args.messages):
                    producer.send(topic, b"v%d" % i, partition=p)
            producer.flush()
        print(f"one broker (also the coordinator), {args.partitions} partitions; "
              f"{args.repeat} rounds per session timeout", flush=True)
        print(f"{'session':>9s} {'close with a peer: p50':>24s} {'max':>8s} "
              f"{'close alone: p50':>18s} {'max':>8s}")
        for session_ms in sessions:
            rounds = [one_round(broker.address, topic, session_ms) for _ in range(args.repeat)]
            first = [r[0] for r in rounds]
            last = [r[1] for r in rounds]
            print(f"{session_ms / 1000:>8.0f}s {statistics.median(first) * 1000:>21.1f} ms "
                  f"{max(first) * 1000:>5.1f} ms {statistics.median(last) * 1000:>15.1f} ms "
                  f"{max(last) * 1000:>5.1f} ms", flush=True)
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
