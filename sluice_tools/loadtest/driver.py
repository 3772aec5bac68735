"""``sluice loadtest``: many consumers in several processes against a running cluster.

The driver (this module, the parent process) makes sure the topic exists, starts ``processes``
worker processes (:mod:`sluice_tools.loadtest.worker`), each running its share of the
``consumers`` real Sluice consumers on one reactor, spread over ``groups`` groups. Workers report
what their consumers live through as JSON lines on stdout; the driver scrapes the coordinator's
``/metrics`` every ``scrape_interval_s``, shows a progress line, carries out the planned
disturbances, and at the end writes a JSON result and a PNG plot.

Disturbances:

- ``kill_share`` at ``kill_at_s``: that share of the *worker processes* (at least one; the
  last ones) get SIGKILL, all their consumers with them: the coordinator must notice through the
  closed sockets (or failed pings) and rebalance their groups;
- ``pause_share`` at ``pause_at_s`` for ``pause_for_s``: that share of the *worker processes*
  (at least one) get SIGSTOP, then SIGCONT. A pause longer than the session timeout expires
  their consumers; they must stop fetching and re-register when they wake.

A *false expiration* is a consumer that lost its membership (its channel closed or it had to
re-register) although it was neither killed nor paused. The target is zero.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sluice_tools.loadtest import metrics as prom
from sluice_tools.loadtest import plot


@dataclass
class LoadTestConfig:
    bootstrap_servers: str
    topic: str
    consumers: int
    processes: int = 2
    groups: int = 1
    partitions: int = 12
    replication_factor: int = 1
    session_timeout_ms: int = 30000
    duration_s: float = 60.0
    kill_share: float = 0.0
    kill_at_s: float = 0.0
    pause_share: float = 0.0
    pause_at_s: float = 0.0
    pause_for_s: float = 0.0
    group_prefix: str = "loadtest"
    ramp_s: float = 0.0
    metrics_urls: dict[int, str] = field(default_factory=dict)
    #: A properties file of client security keys (``--command-config``): the driver's admin
    #: connections and every worker's consumers use it. Its path, not its contents, goes to
    #: the workers (their command line is visible to every local user).
    command_config: str | None = None
    scrape_interval_s: float = 5.0
    out_dir: Path = Path(".")
    progress: bool = True

    def check(self) -> None:
        """Raise ``ValueError`` naming the option for a value that cannot work."""
        if self.consumers < 1:
            raise ValueError("--consumers must be at least 1")
        if not 1 <= self.processes <= self.consumers:
            raise ValueError("--processes must be between 1 and --consumers")
        if not 1 <= self.groups <= self.consumers:
            raise ValueError("--groups must be between 1 and --consumers")
        for name in ("kill_share", "pause_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1")
        if self.duration_s <= 0:
            raise ValueError("--duration must be positive")


def consumer_id(worker: int, index: int) -> str:
    return f"lt-w{worker}-c{index}"


def group_of(cfg: LoadTestConfig, global_index: int) -> str:
    return f"{cfg.group_prefix}-g{global_index % cfg.groups}"


def plan_workers(cfg: LoadTestConfig) -> list[list[tuple[str, str]]]:
    """``[(consumer id, group), ...]`` per worker; consumers dealt round robin so every worker
    holds members of every group (a paused worker then disturbs every group a little)."""
    plan: list[list[tuple[str, str]]] = [[] for _ in range(cfg.processes)]
    for k in range(cfg.consumers):
        w = k % cfg.processes
        plan[w].append((consumer_id(w, len(plan[w])), group_of(cfg, k)))
    return plan


class _Worker:
    def __init__(self, index: int, members: list[tuple[str, str]], cfg: LoadTestConfig,
                 events: queue.Queue) -> None:
        self.index = index
        self.members = members
        spec = {"worker": index, "bootstrap_servers": cfg.bootstrap_servers,
                "topic": cfg.topic, "members": members,
                "session_timeout_ms": cfg.session_timeout_ms, "ramp_s": cfg.ramp_s,
                "command_config": cfg.command_config}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice_tools.loadtest.worker", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.stderr_tail: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, events), daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _read(self, stream: TextIO, events: queue.Queue) -> None:
        for line in stream:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["w"] = self.index
            events.put(ev)
        events.put({"ev": "worker_exit", "w": self.index})

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-20:]

    def command(self, cmd: dict[str, Any]) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout: float) -> None:
        self.command({"cmd": "stop"})
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Tracker:
    """Folds worker events into per-consumer state and the figures of the result."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.started: dict[str, float] = {}
        self.joined: dict[str, float] = {}  # consumer -> seconds from its start to first owning
        self.registered: set[str] = set()
        self.owning: set[str] = set()
        self.disturbed: set[str] = set()
        self.lost: dict[str, int] = {}
        self.errors: list[dict[str, Any]] = []
        # group -> generation -> [first revoke t, last assigned t]
        self.generations: dict[str, dict[int, list[float | None]]] = {}
        self.last_revoke: dict[str, float] = {}
        self.exited: set[int] = set()

    def feed(self, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        c = ev.get("c")
        t = ev.get("t", time.time()) - self.t0
        if kind == "started":
            self.started[c] = t
        elif kind == "registered":
            self.registered.add(c)
        elif kind == "assigned":
            g, gen = ev["g"], int(ev["gen"])
            if ev.get("parts", 0) > 0:
                self.owning.add(c)
            else:
                self.owning.discard(c)
            if c not in self.joined and c in self.started:
                self.joined[c] = t - self.started[c]
            span = self.generations.setdefault(g, {}).setdefault(
                gen, [self.last_revoke.get(g), None])
            span[1] = t if span[1] is None else max(span[1], t)
        elif kind == "revoked":
            g = ev["g"]
            self.owning.discard(c)
            # the first StopFetcher of a rebalance opens its span
            prev = self.last_revoke.get(g)
            latest_end = max((s[1] or 0.0 for s in self.generations.get(g, {}).values()),
                             default=0.0)
            if prev is None or prev < latest_end:
                self.last_revoke[g] = t
        elif kind == "lost":
            self.registered.discard(c)
            self.owning.discard(c)
            self.lost[c] = self.lost.get(c, 0) + 1
        elif kind == "killed":
            self.disturbed.add(c)
            self.registered.discard(c)
            self.owning.discard(c)
        elif kind == "error":
            self.errors.append(ev)
        elif kind == "worker_exit":
            self.exited.add(ev["w"])

    def rebalance_events(self) -> list[dict[str, Any]]:
        out = []
        for g, gens in self.generations.items():
            for gen, (start, end) in sorted(gens.items()):
                if start is not None and end is not None and end >= start:
                    out.append({"group": g, "generation": gen, "end_t": round(end, 3),
                                "duration_s": round(end - start, 4)})
        return out


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    v = sorted(values)

    def pick(q: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]
    return {"count": len(v), "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99),
            "max": v[-1]}


def security_of(command_config: str | None) -> Any:
    """The :class:`~consumer_client.security.ClientSecurity` of a ``--command-config`` file
    (PLAINTEXT without one)."""
    from broker_core.config.properties import read_properties
    from consumer_client.security import ClientSecurity

    if command_config is None:
        return ClientSecurity()
    return ClientSecurity.from_mapping(read_properties(Path(command_config)))


def _coordinator_id(bootstrap_servers: str, security: Any = None) -> int | None:
    from sluice_tools.admin import AdminError, find_coordinator

    try:
        return find_coordinator(bootstrap_servers, timeout=5, security=security)[0]
    except (AdminError, OSError):  # none elected right now, or no broker answers
        return None


def _ensure_topic(cfg: LoadTestConfig) -> None:
    from sluice_tools.admin import AdminClient, AdminError

    admin = AdminClient(bootstrap_servers=cfg.bootstrap_servers,
                        security=security_of(cfg.command_config))
    if cfg.topic in admin.list_topics():
        return
    try:
        admin.create_topic(cfg.topic, cfg.partitions, cfg.replication_factor)
    except AdminError as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def run(cfg: LoadTestConfig, out: TextIO = sys.stderr) -> dict[str, Any]:
    """Run one load test; returns the result (also written to ``out_dir``)."""
    cfg.check()
    _ensure_topic(cfg)
    events: queue.Queue = queue.Queue()
    t0 = time.time()
    tracker = _Tracker(t0)
    actions: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    scrapes: list[tuple[float, int | None, prom.Samples]] = []
    # The baseline, before any consumer exists: the run's counters count from it, and the
    # first point of the run already has a window for its rates.
    timeline.append(_sample(cfg, tracker, scrapes, time.time() - t0))
    plan = plan_workers(cfg)
    workers = [_Worker(i, members, cfg, events) for i, members in enumerate(plan)]
    killed = paused = resumed = False
    paused_workers: list[_Worker] = []
    next_scrape = time.time() - t0 + cfg.scrape_interval_s
    try:
        while True:
            drain(events, tracker, 0.2)
            now = time.time() - t0
            if cfg.kill_share > 0 and not killed and now >= cfg.kill_at_s:
                killed = True
                # the last workers, so a pause (which takes the first) hits others
                n = max(1, round(cfg.kill_share * len(workers)))
                for w in workers[-n:]:
                    w.signal(signal.SIGKILL)
                    for c, _ in w.members:
                        tracker.feed({"ev": "killed", "c": c, "t": time.time()})
                actions.append({"t": round(now, 3), "what": f"kill -9 {n} workers "
                                f"({sum(len(w.members) for w in workers[-n:])} consumers)"})
            if cfg.pause_share > 0 and not paused and now >= cfg.pause_at_s:
                paused = True
                n = max(1, round(cfg.pause_share * len(workers)))
                paused_workers = workers[:n]
                for w in paused_workers:
                    w.signal(signal.SIGSTOP)
                    tracker.disturbed.update(c for c, _ in w.members)
                actions.append({"t": round(now, 3), "what": f"SIGSTOP {n} workers "
                                f"({sum(len(w.members) for w in paused_workers)} consumers)"})
            if paused and not resumed and now >= cfg.pause_at_s + cfg.pause_for_s:
                resumed = True
                for w in paused_workers:
                    w.signal(signal.SIGCONT)
                actions.append({"t": round(now, 3), "what": "SIGCONT"})
            if now >= next_scrape:
                next_scrape = now + cfg.scrape_interval_s
                timeline.append(_sample(cfg, tracker, scrapes, now))
                if cfg.progress:
                    _progress(out, cfg, tracker, now, timeline[-1])
            if now >= cfg.duration_s:
                break
            if len(tracker.exited) == len(workers):
                break
    finally:
        # Members stopped at the end leave with UnregisterConsumer: the coordinator counts them
        # as leaves, not expirations, so the figures go on to the final scrape.
        for w in paused_workers:
            w.signal(signal.SIGCONT)
        for w in workers:
            w.stop(timeout=max(10.0, cfg.session_timeout_ms / 1000))
        try:
            while True:
                tracker.feed(events.get_nowait())
        except queue.Empty:
            pass
    if cfg.progress:
        out.write("\n")
    timeline.append(_sample(cfg, tracker, scrapes, time.time() - t0))
    result = _result(cfg, tracker, scrapes, timeline, actions, workers)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / "loadtest.json").write_text(json.dumps(result, indent=2, default=str))
    if plot.available():
        plot.render(result, cfg.out_dir / "loadtest.png")
        result["plot"] = str(cfg.out_dir / "loadtest.png")
    else:
        out.write("matplotlib is not installed (pip install '.[bench]'): no plot written\n")
    return result


def drain(events: queue.Queue, tracker: _Tracker, for_s: float) -> int:
    """Feed worker events to ``tracker`` for at most ``for_s`` seconds (less when the queue
    runs dry); returns how many. Bounded by time, not by an empty queue: while hundreds of
    consumers join, events never pause for long, and waiting for a pause held the scrapes
    (and the disturbances) back by most of a minute."""
    deadline = time.monotonic() + for_s
    n = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return n
        try:
            tracker.feed(events.get(timeout=left))
        except queue.Empty:
            return n
        n += 1


def _sample(cfg: LoadTestConfig, tracker: _Tracker,
            scrapes: list[tuple[float, int | None, prom.Samples]], now: float) -> dict[str, Any]:
    point: dict[str, Any] = {"t": round(now, 3), "registered": len(tracker.registered),
                             "owning": len(tracker.owning)}
    coord = (_coordinator_id(cfg.bootstrap_servers, security_of(cfg.command_config))
             if cfg.metrics_urls else None)
    url = cfg.metrics_urls.get(coord) if coord is not None else None
    if url is None:
        return point
    try:
        samples = prom.scrape(url)
    except OSError:
        return point
    prev = next((s for s in reversed(scrapes) if s[1] == coord), None)
    baseline = next((s for s in scrapes if s[1] == coord), None)
    scrapes.append((now, coord, samples))
    point["coordinator"] = coord
    point.update(scrape_figures(samples, now, prev, baseline))
    return point


def scrape_figures(samples: prom.Samples, now: float,
                   prev: tuple[float, Any, prom.Samples] | None,
                   baseline: tuple[float, Any, prom.Samples] | None) -> dict[str, Any]:
    """One timeline point's coordinator figures from a scrape taken at ``now``.

    Counters are counted from ``baseline`` (the run's first scrape of this coordinator; None:
    this is it), so a broker's earlier history (the counters run since it started) is not
    the run's: the expired and left members count from 0, each member once, and the last
    point's counts are the summary's. Rates (CPU, ping round trips) are over the window since
    ``prev``, the previous scrape of the same broker; the driver takes one scrape before any
    worker starts, so every point of the run has one."""
    out: dict[str, Any] = {
        "rss_bytes": prom.value(samples, "process_resident_memory_bytes"),
        "members": prom.value(samples, "sluice_coordinator_members")}
    base = baseline[2] if baseline is not None else samples
    for key, name in (("expirations", "sluice_coordinator_expired_members_total"),
                      ("leaves", "sluice_coordinator_left_members_total")):
        # a labelled counter has no sample until its first increment: absent counts as 0
        out[key] = (prom.value(samples, name) or 0.0) - (prom.value(base, name) or 0.0)
    if prev is None:
        return out
    dt = now - prev[0]
    cpu_now = prom.value(samples, "process_cpu_seconds_total")
    cpu_then = prom.value(prev[2], "process_cpu_seconds_total")
    if cpu_now is not None and cpu_then is not None and dt > 0:
        out["cpu_percent"] = round(100 * (cpu_now - cpu_then) / dt, 1)
    h = prom.histogram(samples, "sluice_coordinator_ping_rtt_seconds")
    if h is not None:
        window = h.minus(prom.histogram(prev[2], "sluice_coordinator_ping_rtt_seconds"))
        out["ping_count"] = window.count
        for q, key in ((0.5, "ping_p50_ms"), (0.99, "ping_p99_ms")):
            v = window.quantile(q)
            out[key] = None if v is None else round(v * 1000, 3)
    return out


def _progress(out: TextIO, cfg: LoadTestConfig, tracker: _Tracker, now: float,
              point: dict[str, Any]) -> None:
    width = 30
    done = min(1.0, now / cfg.duration_s)
    bar = "#" * int(done * width) + "-" * (width - int(done * width))
    cpu = point.get("cpu_percent")
    extra = f" coordinator cpu {cpu}%" if cpu is not None else ""
    out.write(f"\r[{bar}] {now:6.1f}s registered {len(tracker.registered)}/{cfg.consumers} "
              f"owning {len(tracker.owning)} lost {sum(tracker.lost.values())}{extra}   ")
    out.flush()


def _result(cfg: LoadTestConfig, tracker: _Tracker,
            scrapes: list[tuple[float, int | None, prom.Samples]],
            timeline: list[dict[str, Any]], actions: list[dict[str, Any]],
            workers: list[_Worker]) -> dict[str, Any]:
    config = asdict(cfg)
    config["out_dir"] = str(cfg.out_dir)
    rebalances = tracker.rebalance_events()
    false_expirations = sorted(c for c in tracker.lost if c not in tracker.disturbed)
    result: dict[str, Any] = {
        "config": config,
        "started_at": tracker.t0,  # wall clock; every other time counts from here
        "consumers_started": len(tracker.started),
        "consumers_joined": len(tracker.joined),
        "join_time_s": _percentiles(list(tracker.joined.values())),
        "rebalances": {"events": rebalances,
                       "duration_s": _percentiles([r["duration_s"] for r in rebalances])},
        "memberships_lost": sum(tracker.lost.values()),
        "false_expirations": len(false_expirations),
        "false_expiration_ids": false_expirations[:50],
        "errors": tracker.errors[:50],
        "actions": actions,
        "timeline": timeline,
        "worker_stderr": {w.index: w.stderr_tail for w in workers if w.stderr_tail},
    }
    # Coordinator-side figures: the difference between the first and last scrape of the broker
    # that was coordinator at the end (a failover restarts the counters on another broker);
    # the same differences as the timeline's last point.
    if scrapes:
        last_t, coord, last = scrapes[-1]
        first_t, _, first = next(s for s in scrapes if s[1] == coord)
        ping = prom.histogram(last, "sluice_coordinator_ping_rtt_seconds")
        ping_window = ping.minus(prom.histogram(
            first, "sluice_coordinator_ping_rtt_seconds")) if ping else None
        reb = prom.histogram(last, "sluice_coordinator_rebalance_duration_seconds")

        def delta(name: str) -> float:
            # a labelled counter has no sample until its first increment: absent counts as 0,
            # as in the timeline (scrape_figures)
            return (prom.value(last, name) or 0.0) - (prom.value(first, name) or 0.0)

        cpu = [p["cpu_percent"] for p in timeline if p.get("cpu_percent") is not None]
        rss = [p["rss_bytes"] for p in timeline if p.get("rss_bytes") is not None]
        result["coordinator"] = {
            "broker_id": coord,
            "cpu_seconds": delta("process_cpu_seconds_total"),
            "cpu_percent_mean": round(sum(cpu) / len(cpu), 1) if cpu else None,
            "cpu_percent_max": max(cpu) if cpu else None,
            "rss_bytes_max": max(rss) if rss else None,
            "rss_bytes_end": rss[-1] if rss else None,
            "expirations": delta("sluice_coordinator_expired_members_total"),
            "leaves": delta("sluice_coordinator_left_members_total"),
            "failed_pings": delta("sluice_coordinator_failed_pings_total"),
            "ping_round_trip_s": None if ping_window is None else {
                "count": ping_window.count, "mean": ping_window.mean,
                "p50": ping_window.quantile(0.5), "p99": ping_window.quantile(0.99),
                "p999": ping_window.quantile(0.999)},
            "rebalance_duration_s": None if reb is None else {
                "count": reb.count, "mean": reb.mean, "p50": reb.quantile(0.5),
                "p99": reb.quantile(0.99)},
        }
    return result
