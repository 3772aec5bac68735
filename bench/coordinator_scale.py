"""The consumer coordinator at scale, measured with the load driver (``sluice loadtest``).

Starts a real ZooKeeper and three broker processes on 127.0.0.1 (each with a ``/metrics``
listener), then runs one of two scenarios and prints the figures (also written as JSON + PNG to
``--out``):

``members`` (default 10,000 consumers, session timeout 30 s, ``--hold`` 300 s): many consumers
    on one coordinator. The consumers join over ``--ramp`` seconds, spread over ``--groups``
    groups on one topic (``--partitions``, replication factor 1: the brokers' data path is not
    what is measured), then the driver keeps them for ``--hold`` seconds. Reported: members
    joined, join time, *false expirations* (memberships lost although nobody was killed or
    paused: the target is zero), failed pings, ping round trips, the coordinator's CPU and
    resident memory.

``rebalance`` (default a 1,000-member group over 1,000 partitions): one group whose topic starts
    with ``--partitions - 10`` partitions; once the group is stable, 10 partitions are added,
    which makes the coordinator rebalance the whole group once (StopFetcher to every member,
    offsets committed, StartFetcher to every member, owners written to ZooKeeper). Reported: that
    rebalance's duration as the coordinator measured it (``sluice_coordinator_rebalance_duration
    _seconds``, difference of two scrapes around it) and as the members saw it (first
    StopFetcher to last StartFetcher).

Everything runs on this machine: with 2 cores, the consumers' worker processes and the brokers
share the CPUs, which the printed figures include. Asserts nothing.

Usage: python bench/coordinator_scale.py members [--consumers 10000] [--processes 4]
           [--groups 10] [--partitions 100] [--session-timeout-ms 30000] [--ramp 60] [--hold 300]
       python bench/coordinator_scale.py rebalance [--consumers 1000] [--partitions 1000]
"""

from __future__ import annotations

import argparse
import json
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
from sluice_tools.loadtest import metrics as prom  # noqa: E402
from sluice_tools.loadtest.driver import LoadTestConfig, run  # noqa: E402
from tests.support.cluster import free_port  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

REBALANCE = "sluice_coordinator_rebalance_duration_seconds"


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


def coordinator_scrape(cluster: ProcessCluster, urls: dict[int, str]) -> prom.Samples:
    return prom.scrape(urls[find_coordinator(cluster.bootstrap, timeout=10)[0]])


def members_scenario(args: argparse.Namespace, cluster: ProcessCluster,
                     urls: dict[int, str]) -> dict[str, Any]:
    cfg = LoadTestConfig(
        bootstrap_servers=cluster.bootstrap, topic="scale", consumers=args.consumers,
        processes=args.processes, groups=args.groups, partitions=args.partitions,
        session_timeout_ms=args.session_timeout_ms, duration_s=args.ramp + args.hold,
        ramp_s=args.ramp, metrics_urls=urls, scrape_interval_s=5.0, out_dir=args.out,
        progress=not args.quiet)
    result = run(cfg)
    coord = result.get("coordinator") or {}
    rtt = coord.get("ping_round_trip_s") or {}
    print(f"\nmembers: {result['consumers_joined']:,} of {args.consumers:,} joined "
          f"(join time p50 {result['join_time_s']['p50']} s, p99 "
          f"{result['join_time_s']['p99']} s, max {result['join_time_s']['max']} s)")
    print(f"held {args.hold:.0f} s after a {args.ramp:.0f} s ramp, session timeout "
          f"{args.session_timeout_ms} ms")
    print(f"false expirations: {result['false_expirations']}  memberships lost: "
          f"{result['memberships_lost']}  coordinator expirations: {coord.get('expirations')}"
          f"  failed pings: {coord.get('failed_pings')}")
    print(f"ping round trip: {int(rtt.get('count') or 0):,} pings, p50 "
          f"{_ms(rtt.get('p50'))}, p99 {_ms(rtt.get('p99'))}, p99.9 {_ms(rtt.get('p999'))}")
    print(f"coordinator (broker {coord.get('broker_id')}): CPU mean "
          f"{coord.get('cpu_percent_mean')}% of a core, max {coord.get('cpu_percent_max')}%; "
          f"RSS max {_mib(coord.get('rss_bytes_max'))}, at the end "
          f"{_mib(coord.get('rss_bytes_end'))}")
    return result


def rebalance_scenario(args: argparse.Namespace, cluster: ProcessCluster,
                       urls: dict[int, str]) -> dict[str, Any]:
    admin = AdminClient(bootstrap_servers=cluster.bootstrap)
    start_partitions = args.partitions - 10
    admin.create_topic("rebalance", start_partitions, 1)
    cfg = LoadTestConfig(
        bootstrap_servers=cluster.bootstrap, topic="rebalance", consumers=args.consumers,
        processes=args.processes, groups=1, partitions=start_partitions,
        session_timeout_ms=args.session_timeout_ms, duration_s=args.hold, ramp_s=args.ramp,
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
    before = coordinator_scrape(cluster, urls)
    added_at = time.time()
    admin.add_partitions("rebalance", args.partitions)
    while not stable(args.partitions):
        time.sleep(0.5)
    time.sleep(2)
    after = coordinator_scrape(cluster, urls)
    h = prom.histogram(after, REBALANCE)
    window = h.minus(prom.histogram(before, REBALANCE)) if h else None
    driver.join()
    result = box["result"]
    since = added_at - result["started_at"]  # the driver's times count from its start
    seen_after = [r for r in result["rebalances"]["events"] if r["end_t"] >= since]
    print(f"partitions {start_partitions:,} -> {args.partitions:,}: coordinator rebalances "
          f"{int(window.count) if window else '?'}, duration mean "
          f"{_s(window.mean if window else None)} (sum {_s(window.total if window else None)})")
    if seen_after:
        longest = max(r["duration_s"] for r in seen_after)
        print(f"as the members saw it: first StopFetcher to last StartFetcher {longest:.3f} s")
    result["added_partitions_rebalance"] = {
        "coordinator_count": window.count if window else None,
        "coordinator_mean_s": window.mean if window else None,
        "members_view_s": max((r["duration_s"] for r in seen_after), default=None)}
    return result


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=["members", "rebalance"])
    ap.add_argument("--consumers", type=int)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--session-timeout-ms", type=int, default=30000)
    ap.add_argument("--ramp", type=float)
    ap.add_argument("--hold", type=float)
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
        args.processes = min(args.processes, 4)
        args.ramp = 20.0 if args.ramp is None else args.ramp
        args.hold = 150.0 if args.hold is None else args.hold
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # brokers and workers inherit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-coordinator-"))
    zk = ZooKeeperServer()
    cluster = None
    try:
        zk.start()
        cluster, urls = start_cluster(zk, tmp, {
            "group.initial.rebalance.delay.ms": "3000",
            "zookeeper.session.timeout.ms": "18000",
            # Every consumer connects from 127.0.0.1: the per-address cap (1,000 by default)
            # would refuse most of them before the coordinator is measured at all.
            "max.connections": "100000", "max.connections.per.ip": "100000"})
        if args.scenario == "members":
            result = members_scenario(args, cluster, urls)
        else:
            result = rebalance_scenario(args, cluster, urls)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "loadtest.json").write_text(json.dumps(result, indent=2, default=str))
        print(f"result: {args.out / 'loadtest.json'}")
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
