"""The consumer coordinator at scale, measured with the load driver (``sluice loadtest``).

Starts a real ZooKeeper and three broker processes on 127.0.0.1 (each with a ``/metrics``
listener), then runs one of two scenarios and prints the figures (also written as JSON + PNG to
``--out``):

``members`` (default 10,000 consumers, session timeout 30 s, ``--hold`` 300 s): many consumers
    on the coordinators (one, or ``--shards`` shards spread over the brokers where the brokers
    shard coordination). The consumers join over ``--ramp`` seconds, spread over ``--groups``
    groups on one topic (``--partitions``, replication factor 1: the brokers' data path is not
    what is measured), then the driver keeps them for ``--hold`` seconds. Reported: members
    joined, join time, rebalances per group, *false expirations* (memberships lost although
    nobody was killed or paused: the target is zero), failed pings, ping round trips, and per
    broker its shards, members, CPU and resident memory and its longest stretch above 90% CPU
    after the ramp; then, from the brokers' logs, how many rebalances completed, were
    superseded or had an attempt fail, and the completed ones' phase times. The 30,000-consumer
    run::

        python bench/coordinator_scale.py members --consumers 30000 --groups 300 \\
            --ramp 60 --hold 300 --shards 12

``rebalance`` (default a 1,000-member group over 1,000 partitions): one group whose topic starts
    with ``--partitions - 10`` partitions; once the group is stable, 10 partitions are added,
    which makes the coordinator rebalance the whole group once (StopFetcher to every member,
    offsets committed, StartFetcher to every member, owners written to ZooKeeper). Reported: that
    rebalance's duration as the coordinator measured it (``sluice_coordinator_rebalance_duration
    _seconds``, difference of two scrapes around it) and as the members saw it (first
    StopFetcher to last StartFetcher).

Everything runs on this machine: with 2 cores, the consumers' worker processes and the brokers
share the CPUs, which the printed figures include (the load average is printed at the start and
the end). Every consumer holds a socket on its group's coordinator, so a broker may need as many
open files as there are consumers: the open-files limit is raised to the hard limit (brokers and
workers inherit it) and a run larger than it says so before it starts. Asserts nothing.

Usage: python bench/coordinator_scale.py members [--consumers 10000] [--processes N]
           [--groups 10] [--partitions 100] [--session-timeout-ms 30000] [--ramp 60] [--hold 300]
           [--shards N] [--fetch-max-wait-ms 500] [--rebalance-handlers N]
           [--initial-rebalance-delay-ms 3000] [--initial-rebalance-quiet-ms N]
       python bench/coordinator_scale.py rebalance [--consumers 1000] [--partitions 1000]

``--processes`` defaults to one worker per :data:`CONSUMERS_PER_WORKER` consumers (at least 4);
``--shards`` sets the brokers' ``group.coordinator.shards`` and is passed only when given (a
broker refuses a key it does not know).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice_tools.admin import AdminClient, describe_groups, find_coordinator  # noqa: E402
from sluice_tools.cli import loadtest_summary  # noqa: E402
from sluice_tools.loadtest import metrics as prom  # noqa: E402
from sluice_tools.loadtest.driver import LoadTestConfig, percentiles, run  # noqa: E402
from tests.support.cluster import free_port  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

REBALANCE = "sluice_coordinator_rebalance_duration_seconds"
#: Consumers per worker process when --processes is not given: a worker's reactor runs every
#: one of its consumers' pings and timers on one core, and this machine has two of them.
CONSUMERS_PER_WORKER = 2500


def start_cluster(zk: ZooKeeperServer, tmp: Path, extra: dict[str, str]
                  ) -> tuple[ProcessCluster, dict[int, str]]:
    cluster = ProcessCluster(zk.hosts, tmp, 3, extra=extra)
    urls = {}
    for bid, b in cluster.brokers.items():
        port = free_port()
        b.extra = {**b.extra, "metrics.listener": f"tcp:{port}:interface=127.0.0.1"}
        urls[bid] = f"http://127.0.0.1:{port}/metrics"
    cluster.start()
    cluster.wait_registered()
    return cluster, urls


PHASES = re.compile(r"group \S+ generation \d+ \((\d+) of (\d+) members moved\): "
                    r"read\+assign ([\d.]+)s, stop ([\d.]+)s, "
                    r"commit ([\d.]+)s, start ([\d.]+)s, owners ([\d.]+)s")
QUEUED = re.compile(r"rebalancing group \S+ \(\d+ members, \d+ partitions, queued ([\d.]+)s\)")
IDS = re.compile(r"\d")  # a word with a digit in it names a member, a group or a count
FAILED_ATTEMPT = re.compile(r"rebalance attempt \d+/\d+ of group \S+ failed: (.*)$")


def rebalance_log_summary(cluster: ProcessCluster) -> list[str]:
    """Where the rebalances' time went, from every broker's log: how many completed, were
    superseded or had an attempt fail (by the first words of the reason), how long the
    attempts waited for a free rebalance handler, and the phase times of the completed ones
    and how many members each stopped and started (p50 / p99 / max)."""
    completed: list[tuple[float, ...]] = []
    moved: list[float] = []
    moved_share: list[float] = []
    queued: list[float] = []
    superseded = 0
    failed: dict[str, int] = {}
    for b in cluster.brokers.values():
        for line in b.log_text().splitlines():
            if m := PHASES.search(line):
                completed.append(tuple(float(x) for x in m.groups()[2:]))
                moved.append(float(m.group(1)))
                moved_share.append(float(m.group(1)) / max(1, int(m.group(2))))
            elif m := QUEUED.search(line):
                queued.append(float(m.group(1)))
            elif "superseded by a newer request" in line:
                superseded += 1
            elif m := FAILED_ATTEMPT.search(line):
                # by reason, not by member: "member lt-w8-c1871 failed" -> "member failed"
                why = " ".join(w for w in m.group(1).split() if not IDS.search(w))
                why = " ".join(why.split()[:4])
                failed[why] = failed.get(why, 0) + 1
    lines = [f"rebalances in the brokers' logs: {len(completed)} completed, {superseded} "
             f"superseded, {sum(failed.values())} attempts failed"
             + "".join(f"; {n} x {why}" for why, n in sorted(failed.items(), key=lambda x: -x[1])
                       [:4])]
    columns = [("queued", queued)] + [
        (name, [c[i] for c in completed])
        for i, name in enumerate(("read+assign", "stop", "commit", "start", "owners"))]
    for name, values in columns:
        if values:
            p = percentiles(values)
            lines.append(f"  {name:12s} p50 {p['p50']:.3f} s  p99 {p['p99']:.3f} s  "
                         f"max {p['max']:.3f} s")
    if moved:
        p, q = percentiles(moved), percentiles(moved_share)
        lines.append(f"  members moved per completed rebalance p50 {p['p50']:.0f}  p99 "
                     f"{p['p99']:.0f}  max {p['max']:.0f} (share of the group p50 "
                     f"{q['p50']:.0%}  p99 {q['p99']:.0%})")
    return lines


def coordinator_scrape(cluster: ProcessCluster, urls: dict[int, str], group: str
                       ) -> prom.Samples:
    """A scrape of ``group``'s coordinator."""
    return prom.scrape(urls[find_coordinator(cluster.bootstrap, group, timeout=10)[0]])


def members_scenario(args: argparse.Namespace, cluster: ProcessCluster,
                     urls: dict[int, str]) -> dict[str, Any]:
    cfg = LoadTestConfig(
        bootstrap_servers=cluster.bootstrap, topic="scale", consumers=args.consumers,
        processes=args.processes, groups=args.groups, partitions=args.partitions,
        session_timeout_ms=args.session_timeout_ms, fetch_max_wait_ms=args.fetch_max_wait_ms,
        duration_s=args.ramp + args.hold,
        ramp_s=args.ramp, metrics_urls=urls, scrape_interval_s=5.0, out_dir=args.out,
        progress=not args.quiet)
    result = run(cfg)
    print(f"\nmembers: held {args.hold:.0f} s after a {args.ramp:.0f} s ramp, session timeout "
          f"{args.session_timeout_ms} ms, fetch.max.wait.ms {args.fetch_max_wait_ms}, "
          f"{args.groups} groups, {args.processes} worker processes")
    for line in loadtest_summary(result, args.consumers, args.out):
        print(line)
    for line in rebalance_log_summary(cluster):
        print(line)
    return result


def rebalance_scenario(args: argparse.Namespace, cluster: ProcessCluster,
                       urls: dict[int, str]) -> dict[str, Any]:
    admin = AdminClient(bootstrap_servers=cluster.bootstrap)
    start_partitions = args.partitions - 10
    admin.create_topic("rebalance", start_partitions, 1)
    cfg = LoadTestConfig(
        bootstrap_servers=cluster.bootstrap, topic="rebalance", consumers=args.consumers,
        processes=args.processes, groups=1, partitions=start_partitions,
        session_timeout_ms=args.session_timeout_ms, fetch_max_wait_ms=args.fetch_max_wait_ms,
        duration_s=args.hold, ramp_s=args.ramp,
        metrics_urls=urls, scrape_interval_s=5.0, out_dir=args.out, progress=False,
        group_prefix="rb")
    box: dict[str, Any] = {}
    driver = threading.Thread(target=lambda: box.update(result=run(cfg)), daemon=True)
    driver.start()
    group = "rb-g0"

    def stable(partitions: int) -> bool:
        try:
            g = describe_groups(cluster.bootstrap, [group], timeout=30)[0]
        except Exception:  # noqa: BLE001 - not there yet
            return False
        owned = {(p.topic, p.partition) for p in g.partitions if p.owner is not None}
        return (g.state == "stable" and len(g.members) == args.consumers
                and len(owned) == partitions)

    t0 = time.monotonic()
    while not stable(start_partitions):
        if time.monotonic() - t0 > args.hold - 30:
            raise SystemExit("the group did not become stable in time")
        time.sleep(2)
    print(f"group of {args.consumers:,} members stable over {start_partitions:,} partitions "
          f"after {time.monotonic() - t0:.1f} s")
    time.sleep(5)  # let the coordinator settle (pings, commits)
    before = coordinator_scrape(cluster, urls, group)
    added_at = time.time()
    admin.add_partitions("rebalance", args.partitions)
    while not stable(args.partitions):
        time.sleep(0.5)
    time.sleep(2)
    after = coordinator_scrape(cluster, urls, group)
    # Where the rebalance's time went, from the coordinator's own log line for each one.
    coordinator = cluster.brokers[find_coordinator(cluster.bootstrap, group, timeout=10)[0]]
    phases = [line for line in coordinator.log_text().splitlines()
              if f"group {group} generation" in line]
    h = prom.histogram(after, REBALANCE)
    window = h.minus(prom.histogram(before, REBALANCE)) if h else None
    driver.join()
    result = box["result"]
    since = added_at - result["started_at"]  # the driver's times count from its start
    seen_after = [r for r in result["rebalances"]["events"] if r["end_t"] >= since]
    print(f"partitions {start_partitions:,} -> {args.partitions:,}: coordinator rebalances "
          f"{int(window.count) if window else '?'}, duration mean "
          f"{_s(window.mean if window else None)} (sum {_s(window.total if window else None)})")
    for line in phases[-2:]:  # the last: the one measured; the one before: the group forming
        print("coordinator:", line[line.index(f"group {group} generation"):])
    if seen_after:
        longest = max(r["duration_s"] for r in seen_after)
        print(f"as the members saw it: first StopFetcher to last StartFetcher {longest:.3f} s")
    result["added_partitions_rebalance"] = {
        "coordinator_count": window.count if window else None,
        "coordinator_mean_s": window.mean if window else None,
        "members_view_s": max((r["duration_s"] for r in seen_after), default=None)}
    return result


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=["members", "rebalance"])
    ap.add_argument("--consumers", type=int)
    ap.add_argument("--processes", type=int)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--session-timeout-ms", type=int, default=30000)
    ap.add_argument("--ramp", type=float)
    ap.add_argument("--fetch-max-wait-ms", type=int, default=500,
                    help="each consumer's fetch.max.wait.ms (default 500; the topic stays "
                    "empty, so each consumer sends a Fetch this often)")
    ap.add_argument("--hold", type=float)
    ap.add_argument("--shards", type=int, help="group.coordinator.shards of the brokers "
                    "(passed only when given)")
    ap.add_argument("--rebalance-handlers", type=int, help="coordinator.rebalance.handlers of "
                    "the brokers: rebalances each coordinator runs at once (passed only when "
                    "given)")
    ap.add_argument("--initial-rebalance-delay-ms", type=int, default=3000,
                    help="group.initial.rebalance.delay.ms of the brokers (default 3000, the "
                    "brokers' default): the longest a group's wait for arrivals to pause")
    ap.add_argument("--initial-rebalance-quiet-ms", type=int, help="group.initial.rebalance."
                    "quiet.ms of the brokers (passed only when given)")
    ap.add_argument("--out", type=Path, default=Path("coordinator-scale-result"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.scenario == "members":
        args.consumers = args.consumers or 10_000
        args.partitions = args.partitions or 100
        args.ramp = 60.0 if args.ramp is None else args.ramp
        args.hold = 300.0 if args.hold is None else args.hold
    else:
        args.consumers = args.consumers or 1_000
        args.partitions = args.partitions or 1_000
        args.processes = min(args.processes or 4, 4)
        args.ramp = 20.0 if args.ramp is None else args.ramp
        args.hold = 150.0 if args.hold is None else args.hold
    if args.processes is None:
        args.processes = max(4, math.ceil(args.consumers / CONSUMERS_PER_WORKER))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # brokers and workers inherit
    if args.consumers + 1000 > hard:
        # With one coordinator (or an unlucky spread of groups) one broker holds every
        # consumer's socket.
        print(f"warning: open-files limit {hard}: a broker coordinating all "
              f"{args.consumers:,} consumers would run out of files (raise ulimit -Hn)")
    print(f"load average at start: {_loadavg()}  ({os.cpu_count()} cores; open-files limit "
          f"{hard})")
    extra = {
        "group.initial.rebalance.delay.ms": str(args.initial_rebalance_delay_ms),
        "zookeeper.session.timeout.ms": "18000",
        # Every consumer connects from 127.0.0.1: the per-address cap (1,000 by default)
        # would refuse most of them before the coordinator is measured at all.
        "max.connections": "100000", "max.connections.per.ip": "100000"}
    if args.shards is not None:
        extra["group.coordinator.shards"] = str(args.shards)
    if args.rebalance_handlers is not None:
        extra["coordinator.rebalance.handlers"] = str(args.rebalance_handlers)
    if args.initial_rebalance_quiet_ms is not None:
        extra["group.initial.rebalance.quiet.ms"] = str(args.initial_rebalance_quiet_ms)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-coordinator-"))
    zk = ZooKeeperServer()
    cluster = None
    try:
        zk.start()
        cluster, urls = start_cluster(zk, tmp, extra)
        if args.scenario == "members":
            result = members_scenario(args, cluster, urls)
        else:
            result = rebalance_scenario(args, cluster, urls)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "loadtest.json").write_text(json.dumps(result, indent=2, default=str))
        if args.scenario == "rebalance":  # the members scenario's summary named it
            print(f"result: {args.out / 'loadtest.json'}")
        print(f"load average at the end: {_loadavg()}")
    finally:
        if cluster is not None:
            cluster.stop()
            args.out.mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("broker-*.log"):  # the coordinator's per-phase timings
                shutil.copy(log, args.out / log.name)
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
