"""Broker-kill failover, ZooKeeper mode against quorum mode, in one run.

Starts two clusters of three broker processes on 127.0.0.1 with the same settings
(``zookeeper.session.timeout.ms`` = ``--session-timeout-ms``, default 6000, which is the
metadata session timeout in both modes; ``min.insync.replicas`` 2): one on a real ZooKeeper,
one in quorum mode (every broker a voter of the metadata quorum, no ZooKeeper). Each has one
topic of ``--partitions`` partitions (default 6) with replication factor 3. Then, for
``--rounds`` rounds per mode, **alternating the modes** (zk, quorum, zk, quorum, ...): wait
until every partition has a leader and three in-sync replicas, ``kill -9`` a broker that leads
partitions, time the failover, restart the broker.

Which broker (``--victim``):

- ``broker`` (default): one that is neither the controller nor (quorum mode) the quorum leader:
  a plain broker death, the same event in both modes;
- ``leader``: in quorum mode the broker whose quorum node leads (usually the controller too),
  in ZooKeeper mode the controller: a quorum election (a controller failover in ZooKeeper mode)
  stacks on the session expiry.

What is timed, from the kill (``time.time()`` here; the brokers log as JSON,
``twist --log-format json``, whose ``log_time`` has sub-millisecond resolution on the same
clock):

- **resumed** (the headline): every affected partition (those the victim led) has acknowledged
  one ``acks=all`` write. From the kill on, every ``--poll-ms`` (default 20) the script reads
  Metadata from a survivor and sends each live leader one Produce (acks=-1, one tiny batch per
  pending partition); a partition leaves the pending set at its first acknowledged write.
  ``first`` is the first affected partition's first acknowledgement.
- the phases, from the brokers' logs (first matching event after the kill):

  - ``elected`` (quorum mode, when the victim's quorum node led): a survivor's quorum node
    logs that it leads a new epoch;
  - ``expired``: quorum mode, the quorum leader logs that the victim's metadata session
    missed its heartbeats; ZooKeeper mode, this process's kazoo watch on the victim's
    ``/brokers/ids/N`` fires (ZooKeeper deleted it);
  - ``noticed``: the controller logs ``broker change: ... dead [victim]`` (it has read the
    registrations; its decisions are not written yet), or, when the victim was the
    controller, a survivor logs that it is now the controller;
  - ``LeaderAndIsr``: the first survivor logs a LeaderAndIsr from the controller after that
    (the new leaderships, written and sent);
  - ``resumed``: as above; what follows the LeaderAndIsr is the new leader's first fetch round
    from the remaining follower and this process's next probe.

Prints one line per round and a summary (median and range per mode, and the ratio of the
medians quorum / ZooKeeper). Asserts nothing. Everything runs in a temp dir, removed afterwards.

Usage: python bench/mode_failover.py [--rounds 4] [--partitions 6] [--session-timeout-ms 6000]
       [--victim broker|leader] [--poll-ms 20] [--events]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402
from twisted.logger import formatEvent  # noqa: E402

from bench.common import log_events, produce_round, watch_deletion  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402
from broker_core.wire.records import Record, build_batch  # noqa: E402
from consumer_client.connection import BrokerConnection  # noqa: E402
from sluice_tools.admin import AdminClient  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

TOPIC = "failover"


class Mode:
    """One cluster (ZooKeeper or quorum mode) and what its rounds measured."""

    def __init__(self, name: str, args: argparse.Namespace, zk: ZooKeeperServer | None,
                 base: Path) -> None:
        self.name = name
        self.args = args
        extra = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms),
                 "min.insync.replicas": "2"}
        self.cluster = ProcessCluster(zk.hosts if zk else None, base / name, 3, extra=extra,
                                      quorum=zk is None)
        for b in self.cluster.brokers.values():
            b.log_format = "json"
        self.kz = KazooClient(hosts=self.cluster.zk_hosts) if zk else None
        self.rounds: list[dict[str, float]] = []

    @property
    def quorum(self) -> bool:
        return self.kz is None

    def live(self, exclude: int | None = None) -> list[int]:
        return [i for i, b in self.cluster.brokers.items()
                if i != exclude and b.proc is not None and b.proc.poll() is None]

    def metadata(self, exclude: int | None = None) -> Any:
        last: Exception | None = None
        for i in self.live(exclude):
            try:
                with BrokerConnection("127.0.0.1", self.cluster.brokers[i].port,
                                      timeout=10) as c:
                    return c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}],
                                                       "allow_auto_topic_creation": False})
            except OSError as e:
                last = e
        raise OSError(f"no broker answered Metadata: {last}")

    def start(self) -> None:
        self.cluster.start()
        self.cluster.wait_registered(timeout=90)
        if self.kz is not None:
            self.kz.start(timeout=15)
        deadline = time.monotonic() + 60
        while True:
            try:
                AdminClient(bootstrap_servers=self.cluster.bootstrap).create_topic(
                    TOPIC, self.args.partitions, 3)
                break
            except Exception as e:  # the controller may not be ready yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: topic not created: {e}") from e
                time.sleep(0.5)

    def wait_full_isr(self, timeout: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                md = self.metadata()
                parts = [p for t in md.topics if t.name == TOPIC for p in t.partitions]
                if (len(parts) == self.args.partitions and md.controller_id > 0
                        and all(p.leader_id > 0 and len(p.isr_nodes) == 3 for p in parts)):
                    return md
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: not fully replicated after {timeout}s")
            time.sleep(0.3)

    def quorum_leader(self) -> int:
        """The broker whose quorum node leads the highest epoch, from the logs (-1: none)."""
        return self.current_leader()[1]

    def pick_victim(self, md: Any) -> int | None:
        leads: dict[int, int] = {}
        for t in md.topics:
            for p in t.partitions:
                leads[p.leader_id] = leads.get(p.leader_id, 0) + 1
        qleader = self.quorum_leader() if self.quorum else -1
        if self.args.victim == "leader":
            victim = qleader if self.quorum else md.controller_id
            return victim if victim in leads else None
        candidates = [b for b in sorted(leads)
                      if b not in (md.controller_id, qleader) and b > 0]
        return candidates[0] if candidates else None

    def current_leader(self) -> tuple[int, int]:
        """(epoch or czxid, broker) of the quorum leader (quorum mode) or controller (ZooKeeper
        mode), as this moment knows it."""
        if self.quorum:
            best = (-1, -1)
            for i, b in self.cluster.brokers.items():
                for e in log_events(b.log_file):
                    if e.get("log_format") == "quorum node {node} leads epoch {epoch}" \
                            and e.get("node") == i:
                        best = max(best, (int(e["epoch"]), i))
            return best
        assert self.kz is not None
        try:
            data, stat = self.kz.get("/controller")
        except Exception:  # no controller right now
            return (-1, -1)
        return (stat.czxid, int(json.loads(data)["brokerid"]))

    def chain_round(self) -> None:
        """Kill the quorum leader's broker (ZooKeeper mode: the controller's), then, as soon as
        another took over, that one too: two voters down at once, no majority. After
        ``--chain-down-s`` the first comes back; timed until every partition either led takes
        an acks=all write."""
        md = self.wait_full_isr()
        first_gen, first = self.current_leader()
        if first < 0:
            print(f"  {self.name}: no leader known; round skipped")
            return
        t_kill = time.time()
        self.cluster.brokers[first].kill(signal.SIGKILL)
        deadline = time.time() + 60
        while True:
            gen, second = self.current_leader()
            if gen > first_gen and second > 0 and second != first:
                break
            if time.time() > deadline:
                raise RuntimeError(f"{self.name}: nobody took over from broker {first}")
            time.sleep(0.02)
        t_second = time.time()
        self.cluster.brokers[second].kill(signal.SIGKILL)
        affected = sorted(p.partition_index for t in md.topics for p in t.partitions
                          if p.leader_id in (first, second))
        time.sleep(self.args.chain_down_s)
        self.cluster.brokers[first].start()
        t_back = time.time()
        first_ok, resumed = self.probe(affected, second, t_kill)
        self.rounds.append({"second kill": t_second - t_kill, "restart": t_back - t_kill,
                            "first": first_ok, "resumed": resumed})
        print(f"  {self.name:6s} kill -9 broker {first}, then at {t_second - t_kill:.2f} s its "
              f"successor {second}; broker {first} restarted at {t_back - t_kill:.2f} s; "
              f"partitions {affected}: first {first_ok:.2f}, resumed {resumed:.2f} s")
        if self.args.events:
            self.dump_events(t_kill, t_kill + resumed + 0.5)
        self.cluster.brokers[first].wait_listening()
        self.cluster.brokers[second].start()
        self.cluster.brokers[second].wait_listening()

    def one_round(self) -> None:
        if self.args.victim == "chain":
            self.chain_round()
            return
        md = self.wait_full_isr()
        victim = self.pick_victim(md)
        tries = 0
        while victim is None:
            # Preferred leaders are spread over the three brokers, so another try after
            # the cluster settles usually finds one.
            tries += 1
            if tries > 20:
                print(f"  {self.name}: no suitable victim (controller {md.controller_id}, "
                      f"quorum leader {self.quorum_leader()}); round skipped")
                return
            time.sleep(0.5)
            md = self.wait_full_isr()
            victim = self.pick_victim(md)
        affected = sorted(p.partition_index for t in md.topics for p in t.partitions
                          if p.leader_id == victim)
        controller = md.controller_id
        expired_at: list[float] = []
        if self.kz is not None:
            _, expired_at = watch_deletion(self.kz, f"/brokers/ids/{victim}", time.time)
        qleader = self.quorum_leader() if self.quorum else -1
        t_kill = time.time()
        self.cluster.brokers[victim].kill(signal.SIGKILL)
        first, resumed = self.probe(affected, victim, t_kill)
        time.sleep(0.3)  # the survivors' logs flushed
        phases = self.phases(victim, t_kill, expired_at)
        phases["first"], phases["resumed"] = first, resumed
        self.rounds.append(phases)
        where = f"controller {controller}" + (f", quorum leader {qleader}" if self.quorum
                                               else "")
        print(f"  {self.name:6s} kill -9 broker {victim} ({where}; it led partitions "
              f"{affected}): " + ", ".join(
                  f"{k} {v:5.2f}" for k, v in phases.items() if v is not None) + " s")
        if self.args.events:
            self.dump_events(t_kill, t_kill + resumed + 0.5)
        b = self.cluster.brokers[victim]
        b.start()
        b.wait_listening()

    def starting(self) -> set[int]:
        """Brokers whose process runs but that do not listen yet (a restart in a chain)."""
        import socket
        out = set()
        for i in self.live():
            try:
                socket.create_connection(("127.0.0.1", self.cluster.brokers[i].port),
                                         timeout=0.2).close()
            except OSError:
                out.add(i)
        return out

    def newest_leaders(self, brokers: set[int]) -> dict[int, int]:
        """Partition -> leader, from the Metadata of every one of ``brokers``, the highest
        leader epoch winning (a broker just restarted may still know old leaders)."""
        best: dict[int, tuple[int, int]] = {}
        for i in sorted(brokers):
            try:
                with BrokerConnection("127.0.0.1", self.cluster.brokers[i].port,
                                      timeout=5) as c:
                    md = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}],
                                                     "allow_auto_topic_creation": False})
            except OSError:
                continue
            for t in md.topics:
                for p in t.partitions:
                    if p.partition_index not in best or p.leader_epoch > \
                            best[p.partition_index][0]:
                        best[p.partition_index] = (p.leader_epoch, p.leader_id)
        return {p: leader for p, (_, leader) in best.items()}

    def probe(self, partitions: list[int], victim: int, t0: float) -> tuple[float, float]:
        """Seconds from ``t0`` to the first, and to the last, first acknowledged acks=all
        write among ``partitions``."""
        batch = build_batch([Record(None, b"probe", [], int(time.time() * 1000))])
        pending = set(partitions)
        acked: list[float] = []
        conns: dict[int, BrokerConnection] = {}
        try:
            while pending:
                if time.time() - t0 > 120:
                    raise RuntimeError(f"{self.name}: partitions {sorted(pending)} took no "
                                       "write for 120 s")
                t_round = time.monotonic()
                live = set(self.live(exclude=victim)) - self.starting()
                leaders = self.newest_leaders(live)
                by_leader: dict[int, list[int]] = {}
                for p in pending:
                    if leaders.get(p, -1) in live:
                        by_leader.setdefault(leaders[p], []).append(p)
                bodies = {leader: {"transactional_id": None, "acks": -1, "timeout_ms": 3000,
                                   "topic_data": [{"name": TOPIC, "partition_data": [
                                       {"index": p, "records": batch} for p in ps]}]}
                          for leader, ps in by_leader.items()}
                answers = produce_round(conns, lambda b: self.cluster.brokers[b].port, bodies,
                                        timeout=10)
                for resp in answers.values():
                    for t in resp.responses:
                        for pr in t.partition_responses:
                            if pr.error_code == 0 and pr.index in pending:
                                pending.discard(pr.index)
                                acked.append(time.time() - t0)
                time.sleep(max(0.0, self.args.poll_ms / 1000 - (time.monotonic() - t_round)))
        finally:
            for c in conns.values():
                c.close()
        return min(acked), max(acked)

    def phases(self, victim: int, t_kill: float, expired_at: list[float]
               ) -> dict[str, float | None]:
        survivors = [self.cluster.brokers[i] for i in self.live(exclude=victim)]
        events = sorted((e for b in survivors for e in log_events(b.log_file)
                         if e.get("log_time", 0) >= t_kill), key=lambda e: e["log_time"])
        elected = noticed = lai = None
        expired = expired_at[0] - t_kill if expired_at else None
        for e in events:
            fmt = e.get("log_format", "")
            at = e["log_time"] - t_kill
            if self.quorum and elected is None and fmt == "quorum node {node} leads epoch {epoch}":
                elected = at
            elif self.quorum and expired is None and fmt.startswith("metadata session") \
                    and "missed its heartbeats" in fmt:
                expired = at
            elif noticed is None and (
                    (fmt.startswith("broker change:") and victim in (e.get("dead") or []))
                    or fmt == "broker {b} is now the controller (epoch {e})"):
                noticed = at
            elif noticed is not None and lai is None and fmt.startswith("LeaderAndIsr ("):
                lai = at
        return {"elected": elected, "expired": expired, "noticed": noticed, "LeaderAndIsr": lai}

    def dump_events(self, start: float, end: float) -> None:
        rows = []
        for i in self.live():
            for e in log_events(self.cluster.brokers[i].log_file):
                if start <= e.get("log_time", 0) <= end:
                    rows.append((e["log_time"] - start, i, formatEvent(e)))
        for at, i, text in sorted(rows):
            print(f"      {at:7.3f} broker {i}: {text[:200]}")

    def stop(self) -> None:
        if self.kz is not None:
            try:
                self.kz.stop()
                self.kz.close()
            except Exception:
                pass
        self.cluster.stop()


def summary(modes: list[Mode]) -> None:
    print("\nsummary (seconds from the kill; median [min-max] over the rounds):")
    medians = {}
    for m in modes:
        if not m.rounds:
            continue
        parts = []
        for key in ("second kill", "restart", "elected", "expired", "noticed", "LeaderAndIsr",
                    "first", "resumed"):
            values = [r[key] for r in m.rounds if r.get(key) is not None]
            if values:
                parts.append(f"{key} {statistics.median(values):.2f} "
                             f"[{min(values):.2f}-{max(values):.2f}]")
        medians[m.name] = statistics.median(r["resumed"] for r in m.rounds)
        print(f"  {m.name:6s} ({len(m.rounds)} rounds): " + ", ".join(parts))
    if len(medians) == 2 and medians["zk"] > 0:
        print(f"  writes resumed, quorum / zk (medians): {medians['quorum'] / medians['zk']:.2f}")
    print(f"  load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per mode")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--victim", choices=("broker", "leader", "chain"), default="broker")
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--chain-down-s", type=float, default=1.0,
                    help="--victim chain: how long both brokers stay down")
    ap.add_argument("--modes", default="zk,quorum", help="which modes, in alternation order")
    ap.add_argument("--events", action="store_true",
                    help="print every survivor log event from the kill to the resumption")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-mode-failover-"))
    zk = ZooKeeperServer()
    modes: list[Mode] = []
    try:
        names = args.modes.split(",")
        if "zk" in names:
            zk.start()
        for name in names:
            modes.append(Mode(name, args, zk if name == "zk" else None, tmp))
            modes[-1].start()
        print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for r in range(args.rounds):
            print(f"round {r + 1}")
            for m in modes:
                m.one_round()
        summary(modes)
    finally:
        for m in modes:
            m.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
