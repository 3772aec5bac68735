"""Committed metadata-store writes per second on three quorum voters: what the controller and
the group coordinator see of the metadata quorum, as opposed to ``bench/raft_quorum.py``'s raw
entries.

Three voters, each its own process (this script with ``--node N``) on 127.0.0.1, wired as a
broker in quorum mode wires them (``metadata.store=quorum``): an ``EmbeddedQuorum`` (the quorum
node on its disk log, default timeouts) with its ``NetworkQuorumClient``, and a
``QuorumMetadataStore`` on that client with an open session. One designated process keeps N
``set`` calls of 100-byte values in flight on pre-created nodes (one node per slot), issuing a
new one as each Deferred fires, that is once the write is committed *and* applied to the
local tree; and, as one more row, N ``multi`` calls of 10 ``SetData`` each (one log entry per
multi). Writes are counted for ``--seconds`` after a ``--warmup-s`` warm-up; p50/p99 are the
latencies of the writes that completed in that window. The designated process is first the
quorum leader (its writes are proposed locally), then a follower (its writes are forwarded to
the leader with MetadataWrite and fire when the follower has applied them). One quorum serves
every row; the leader is checked before and after each row. Each child reports a row as one
JSON line on stdout; nothing is asserted but that every write succeeded.

    python bench/quorum_store_writes.py [--in-flight 1,8,64,256] [--multi-in-flight 64]
                                        [--seconds 10] [--warmup-s 2] [--roles leader,follower]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.quorum_processes import ROOT, QuorumProcess, QuorumProcesses  # noqa: E402

CLUSTER_ID = "store-bench"
OPS_PER_MULTI = 10


# -- the child: one voter with its store -------------------------------------------------------

def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def _workload(store: Any, reactor: Any, tag: str, op: str, in_flight: int,
                    payload: int, warmup_s: float, seconds: float) -> dict[str, Any]:
    """Pre-create the slots' nodes, keep ``in_flight`` writes outstanding, and measure."""
    from twisted.internet import defer  # noqa: PLC0415 (child only)

    from broker_core.metadata import SetData  # noqa: PLC0415

    per_slot = OPS_PER_MULTI if op == "multi" else 1
    base = f"/bench/{tag}"
    paths = [[f"{base}/s{s}-{k}" for k in range(per_slot)] for s in range(in_flight)]
    await store.create(base, b"", makepath=True)
    await defer.gatherResults([store.create(p, b"") for slot in paths for p in slot],
                              consumeErrors=True)
    value = b"v" * payload
    latencies: list[float] = []
    errors: list[str] = []
    total = 0
    start = time.monotonic()
    window = (start + warmup_s, start + warmup_s + seconds)

    async def slot(slot_paths: list[str]) -> None:
        nonlocal total
        while time.monotonic() < window[1] and not errors:
            t0 = time.monotonic()
            try:
                if op == "multi":
                    await store.multi([SetData(p, value) for p in slot_paths])
                else:
                    await store.set(slot_paths[0], value)
            except Exception as e:  # reported, and the run stops
                errors.append(f"{type(e).__name__}: {e}")
                return
            t1 = time.monotonic()
            total += 1
            if window[0] <= t0 and t1 <= window[1]:
                latencies.append(t1 - t0)

    await defer.gatherResults([defer.Deferred.fromCoroutine(slot(s)) for s in paths],
                              consumeErrors=True)
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 \
            if latencies else float("nan")

    return {"writes": len(latencies), "writes_per_s": len(latencies) / seconds,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "total": total, "errors": errors[:3],
            "error_count": len(errors)}


async def _child(reactor: Any, args: argparse.Namespace) -> None:
    from twisted.internet import threads  # noqa: PLC0415 (child only)
    from twisted.logger import globalLogBeginner, textFileLogObserver  # noqa: PLC0415

    from broker_core.config.quorum import VoterAddress  # noqa: PLC0415
    from broker_core.raft.embedded import EmbeddedQuorum  # noqa: PLC0415
    from broker_core.raft.metadata_store import QuorumMetadataStore  # noqa: PLC0415

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)],
                                     redirectStandardIO=False)
    voters = {}
    for item in args.voters.split(","):
        node, _, addr = item.partition("@")
        host, _, port = addr.rpartition(":")
        voters[int(node)] = VoterAddress(int(node), host, int(port))
    me = voters[args.node]
    quorum = EmbeddedQuorum(args.node, CLUSTER_ID, voters, (me.host, me.port),
                            Path(args.data_dir), reactor)
    # The broker's defaults: zookeeper.session.timeout.ms and connection.timeout.ms, 18 s.
    store = QuorumMetadataStore(quorum.client, reactor=reactor, session_timeout=18.0,
                                connect_timeout=18.0)
    await quorum.start()
    try:
        await store.start()
        _emit(event="ready", node=args.node)
        while True:
            line = await threads.deferToThread(sys.stdin.readline)
            if not line:
                break
            cmd = json.loads(line)
            if cmd["cmd"] == "role":
                _emit(event="role", node=args.node, leading=quorum.client.leading,
                      seq=cmd["seq"])
            elif cmd["cmd"] == "run":
                leading = quorum.client.leading
                result = await _workload(store, reactor, cmd["tag"], cmd["op"],
                                         cmd["in_flight"], cmd["payload"], cmd["warmup_s"],
                                         cmd["seconds"])
                _emit(event="result", node=args.node, seq=cmd["seq"], leading_before=leading,
                      leading_after=quorum.client.leading, **result)
    finally:
        await store.stop()
        await quorum.stop()


# -- the parent ------------------------------------------------------------------------------

class StoreNode(QuorumProcess):
    """A voter as this script in ``--node`` mode, taking commands on stdin."""

    def start(self, voters: str | None, cluster_id: str | None, peers: str = "",
              bootstrap: str = "") -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        args = [sys.executable, str(Path(__file__).resolve()), "--node", str(self.node_id),
                "--voters", str(voters), "--data-dir", str(self.data_dir)]
        self.starts += 1
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                         cwd=ROOT, env=env)

    def send(self, **cmd: Any) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()  # end of commands: the child closes its session
            except OSError:
                pass
        super().stop(timeout)


class Bench:
    def __init__(self, quorum: QuorumProcesses) -> None:
        self.quorum = quorum
        self.seq = 0

    def ask(self, node: StoreNode, timeout: float, **cmd: Any) -> dict[str, Any]:
        self.seq += 1
        seq = self.seq
        node.send(seq=seq, **cmd)
        return self.quorum.wait(
            lambda: next((e for e in node.events() if e.get("seq") == seq), None),
            timeout, f"node {node.node_id} to answer {cmd['cmd']}")

    def roles(self) -> dict[int, bool]:
        return {n: self.ask(p, 30, cmd="role")["leading"]
                for n, p in self.quorum.nodes.items()}  # type: ignore[arg-type]

    def leader(self) -> int:
        deadline = time.monotonic() + 30
        while True:
            leaders = [n for n, leading in self.roles().items() if leading]
            if len(leaders) == 1:
                return leaders[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no single leader: {leaders}")
            time.sleep(0.2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--in-flight", default="1,8,64,256", help="set calls in flight, one row each")
    p.add_argument("--multi-in-flight", default="64",
                   help=f"multi calls ({OPS_PER_MULTI} SetData each) in flight, one row each")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--payload-bytes", type=int, default=100)
    p.add_argument("--roles", default="leader,follower",
                   help="where the writes are issued: leader, follower")
    p.add_argument("--node", type=int, help=argparse.SUPPRESS)  # child mode
    p.add_argument("--voters", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.node is not None:
        from twisted.internet import defer, task  # noqa: PLC0415

        task.react(lambda reactor: defer.Deferred.fromCoroutine(_child(reactor, args)))
        return

    rows = [("set", int(n)) for n in args.in_flight.split(",") if n] + \
           [("multi", int(n)) for n in args.multi_in_flight.split(",") if n]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="quorum-store-bench-") as tmp:
        quorum = QuorumProcesses(Path(tmp), cluster_id=CLUSTER_ID)
        quorum.nodes = {n: StoreNode(n, q.port, Path(tmp), [])  # type: ignore[misc]
                        for n, q in quorum.nodes.items()}
        bench = Bench(quorum)
        try:
            quorum.start()
            quorum.wait(lambda: all(any(e["event"] == "ready" for e in q.events())
                                    for q in quorum.nodes.values()), 60, "three open sessions")
            print(f"committed store writes, {args.payload_bytes}-byte values, "
                  f"{args.seconds:g} s after a {args.warmup_s:g} s warm-up:", flush=True)
            print(f"  {'issued on':9s} {'op':14s} {'in flight':>9s} {'writes/s':>9s} "
                  f"{'sets/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s}", flush=True)
            for role in args.roles.split(","):
                for op, n in rows:
                    leader = bench.leader()
                    node_id = leader if role == "leader" else min(
                        x for x in quorum.nodes if x != leader)
                    node = quorum.nodes[node_id]
                    r = bench.ask(node, args.warmup_s + args.seconds + 120, cmd="run",  # type: ignore[arg-type]
                                  tag=f"{role}-{op}-{n}", op=op, in_flight=n,
                                  payload=args.payload_bytes, warmup_s=args.warmup_s,
                                  seconds=args.seconds)
                    sets = r["writes_per_s"] * (OPS_PER_MULTI if op == "multi" else 1)
                    label = f"multi x{OPS_PER_MULTI}" if op == "multi" else "set"
                    note = ""
                    if r["leading_before"] != (role == "leader") or \
                            r["leading_before"] != r["leading_after"]:
                        note = "  (leadership changed during the row; figure not valid)"
                    if r["error_count"]:
                        failed += r["error_count"]
                        note += f"  ERRORS: {r['error_count']}, e.g. {r['errors']}"
                    print(f"  {role:9s} {label:14s} {n:9d} {r['writes_per_s']:9.0f} "
                          f"{sets:8.0f} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f}"
                          f"  (node {node_id}){note}", flush=True)
        finally:
            quorum.stop()
    if failed:
        raise SystemExit(f"{failed} writes failed")


if __name__ == "__main__":
    main()
