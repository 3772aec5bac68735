"""The metadata quorum on the network: three voters as ``python -m broker_core.raft`` processes
on 127.0.0.1, at the default timeouts (``quorum.election.timeout.ms`` 1000,
``quorum.fetch.timeout.ms`` 2000, ``replica.fetch.wait.max.ms`` 500) unless told otherwise.

(a) **Leader failover.** Wait until a leader has committed the first entry of its epoch (its
LeaderChange: from then on it serves writes), let the quorum settle, ``kill -9`` the leader
and time, from just before the signal, until a new leader has committed the first entry of
its own epoch. The killed node is restarted and rejoins before the next round. Also printed:
*detect*, the time until a survivor stood as candidate (the followers notice a dead leader by
the fetch timeout). Times come from the nodes' ``--events`` lines (``time.time()`` in each
process, same machine).

(b) **Committed writes per second.** A fresh quorum per setting; the leader's load loop keeps
``--in-flight`` proposals of ``--payload-bytes`` bytes outstanding, proposing a new one as each
commits (every write is appended, flushed with fsync on the leader and on a follower, and
committed before it counts). The rate is taken over ``--seconds`` after a warm-up, from the
leader's once-a-second ``load`` events, with the nodes persisting on the reactor thread and
on a writer thread (``--modes``); the leader's flushes per second and the share of time its
writes took are printed with it.

    python bench/raft_quorum.py [--rounds 5] [--in-flight 1,8,64,256] [--seconds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.quorum_processes import QuorumProcesses  # noqa: E402


def failover(rounds: int, settle_s: float, extra: list[str]) -> list[tuple[float, float]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        quorum = QuorumProcesses(Path(tmp), extra=extra)
        try:
            quorum.start()
            event = quorum.wait(lambda: quorum.leader_committed(0), 60, "a first leader")
            for r in range(rounds):
                time.sleep(settle_s)
                epoch = event["epoch"]
                victim = quorum.nodes[event["node"]]
                killed_at = victim.kill9()
                event = quorum.wait(lambda e=epoch: quorum.leader_committed(e), 60,
                                    "a new leader")
                stood = min(e["t"] for p in quorum.nodes.values() if p is not victim
                            for e in p.events() if e["event"] == "role"
                            and e["role"] == "candidate" and e["epoch"] > epoch)
                took, detect = event["t"] - killed_at, stood - killed_at
                results.append((took, detect))
                print(f"  round {r + 1}: leader {victim.node_id} (epoch {epoch}) killed; "
                      f"node {event['node']} committed epoch {event['epoch']} after "
                      f"{took * 1000:.0f} ms (first candidate after {detect * 1000:.0f} ms)",
                      flush=True)
                victim.start(quorum.voters, quorum.cluster_id)
        finally:
            quorum.stop()
    return results


def throughput(in_flight: int, seconds: float, payload: int, extra: list[str],
               mode: str) -> float:
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        quorum = QuorumProcesses(Path(tmp), extra=[*extra, "--load-in-flight", str(in_flight),
                                                   "--load-payload-bytes", str(payload)])
        try:
            quorum.start()
            event = quorum.wait(lambda: quorum.leader_committed(0), 60, "a leader")
            leader = quorum.nodes[event["node"]]

            def loads():
                return [e for e in leader.events() if e["event"] == "load"]

            quorum.wait(lambda: len(loads()) >= 3, 30, "warm-up")  # ~2 s of load
            start = loads()[-1]
            quorum.wait(lambda: loads()[-1]["t"] - start["t"] >= seconds, seconds + 30,
                        "the measuring window")
            end = loads()[-1]
            if any(e["event"] == "role" and e["epoch"] > event["epoch"]
                   for p in quorum.nodes.values() for e in p.events()):
                print("  (an election happened during the window; figure not valid)")
            elapsed = end["t"] - start["t"]
            writes = end["committed"] - start["committed"]
            flushes = end["flushes"] - start["flushes"]
            blocked = (end["persist_s"] - start["persist_s"]) / elapsed
            print(f"  {mode:7s} {in_flight:4d} in flight: {writes / elapsed:8.0f} writes/s; leader: "
                  f"{flushes / elapsed:6.0f} flushes/s ({writes / max(flushes, 1):.1f} writes "
                  f"each), {blocked * 100:4.1f}% of the time writing", flush=True)
            return writes / elapsed
        finally:
            quorum.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--settle-s", type=float, default=3.0)
    p.add_argument("--in-flight", default="1,8,64,256")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--payload-bytes", type=int, default=100)
    p.add_argument("--modes", default="reactor,thread",
                   help="where nodes persist: reactor (default), thread (--persist-thread)")
    p.add_argument("--skip-failover", action="store_true")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("node_args", nargs="*", help="passed to every node (after --)")
    args = p.parse_args()
    extra = list(args.node_args)
    if not args.skip_failover:
        print(f"(a) leader failover, {args.rounds} rounds, kill -9 of the leader:", flush=True)
        rounds = failover(args.rounds, args.settle_s, extra)
        took = [t * 1000 for t, _ in rounds]
        detect = [d * 1000 for _, d in rounds]
        print(f"  to a new leader's first commit: min {min(took):.0f} ms, median "
              f"{statistics.median(took):.0f} ms, max {max(took):.0f} ms")
        print(f"  to the first candidate:         min {min(detect):.0f} ms, median "
              f"{statistics.median(detect):.0f} ms, max {max(detect):.0f} ms")
    if not args.skip_throughput:
        print(f"(b) committed writes per second ({args.payload_bytes}-byte entries):",
              flush=True)
        for k in (int(x) for x in args.in_flight.split(",")):
            for mode in args.modes.split(","):
                flags = ["--persist-thread"] if mode == "thread" else []
                throughput(k, args.seconds, args.payload_bytes, [*extra, *flags], mode)


if __name__ == "__main__":
    main()
