"""``sluice loadtest``: many consumers in several processes against a running cluster.

The driver (this module, the parent process) makes sure the topic exists, starts ``processes``
worker processes (:mod:`sluice_tools.loadtest.worker`), each running its share of the
``consumers`` real Sluice consumers on one reactor, spread over ``groups`` groups. Workers report
what their consumers live through as JSON lines on stdout; the driver scrapes every broker's
``/metrics`` (``metrics_urls``) every ``scrape_interval_s`` (groups may be coordinated by any
broker: each reports the coordinator shards it holds and their members), shows a progress line,
carries out the planned disturbances, and at the end writes a JSON result and a PNG plot.

Per broker it reports CPU (% of one core, per scrape interval), resident memory, coordinator
shards and members, and the longest stretch after the ramp during which its CPU stayed above
:data:`HOT_CPU_PERCENT` (one above :data:`HOT_STRETCH_LIMIT_S` is flagged); for the whole run
the join times, rebalances per group, ping round trips (every broker's histogram summed) and
false expirations.

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
from sluice_tools.loadtest.brokers import (
    HOT_STRETCH_LIMIT_S,
    longest_hot_stretch,
    shards_of,
)

PING_RTT = "sluice_coordinator_ping_rtt_seconds"
REBALANCE_DURATION = "sluice_coordinator_rebalance_duration_seconds"
#: The longest ``--fetch-max-wait-ms``: a minute, far above any useful long poll, and below
#: any request timeout a consumer could be given on top of it.
MAX_FETCH_WAIT_MS = 60_000
#: One scrape: (seconds since the start, broker id, samples).
Scrape = tuple[float, int, prom.Samples]


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
    #: Every consumer's ``fetch.max.wait.ms``: how long the broker holds its empty Fetch. The
    #: load test's topic gets no messages, so each consumer sends one Fetch per this interval;
    #: at the default (500, Kafka's) 30,000 consumers are 60,000 Fetch requests a second, which
    #: on one machine costs the workers and brokers more than coordination does.
    fetch_max_wait_ms: int = 500
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
        if not 0 <= self.fetch_max_wait_ms <= MAX_FETCH_WAIT_MS:
            raise ValueError(f"--fetch-max-wait-ms must be between 0 and {MAX_FETCH_WAIT_MS}")


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


def worker_spec(cfg: LoadTestConfig, index: int, members: list[tuple[str, str]]
                ) -> dict[str, Any]:
    """What worker ``index`` is told: its ``members`` and what each of its consumers needs
    to know of ``cfg`` (read by :func:`sluice_tools.loadtest.worker.consumer_config`)."""
    return {"worker": index, "bootstrap_servers": cfg.bootstrap_servers, "topic": cfg.topic,
            "members": members, "session_timeout_ms": cfg.session_timeout_ms,
            "ramp_s": cfg.ramp_s, "fetch_max_wait_ms": cfg.fetch_max_wait_ms,
            "command_config": cfg.command_config}


def worker_spec_text(spec: dict[str, Any]) -> str:
    """A worker's spec as the first thing on its stdin: its length in bytes on a line, then
    the JSON (ASCII: ``json.dumps`` escapes the rest), so the worker reads exactly it and
    leaves the command lines after it to its reactor."""
    data = json.dumps(spec)
    return f"{len(data)}\n{data}"


class _Worker:
    def __init__(self, index: int, members: list[tuple[str, str]], cfg: LoadTestConfig,
                 events: queue.Queue) -> None:
        self.index = index
        self.members = members
        spec = worker_spec(cfg, index, members)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice_tools.loadtest.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # The spec goes on stdin, not the command line: thousands of members are more than one
        # argument may hold (128 KiB on Linux).
        self.command_raw(worker_spec_text(spec))
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
        self.command_raw(json.dumps(cmd) + "\n")

    def command_raw(self, text: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        """Ask the worker to close its consumers and exit (see :meth:`wait`)."""
        self.command({"cmd": "stop"})

    def wait(self, deadline: float) -> None:
        """Wait for the worker to exit until ``deadline`` (``time.monotonic``), then kill it."""
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
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
        self.worker_stats: dict[int, dict[str, float]] = {}  # worker -> its maxima

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
        elif kind == "stats":
            mine = self.worker_stats.setdefault(ev["w"], {})
            for key in ("consumers", "rss_bytes", "open_files", "timers", "late_s"):
                if isinstance(ev.get(key), (int, float)):
                    mine[key] = max(mine.get(key, 0), ev[key])

    def worker_figures(self) -> dict[str, Any]:
        """What the worker processes cost, from their ``stats`` reports: the largest of each
        figure over the workers, and per consumer (a worker's maximum over its consumers)."""
        stats = [s for s in self.worker_stats.values() if s.get("consumers")]
        if not stats:
            return {}

        def most(key: str) -> float | None:
            values = [s[key] for s in stats if key in s]
            return max(values) if values else None

        def per_consumer(key: str) -> float | None:
            values = [s[key] / s["consumers"] for s in stats if key in s]
            return round(max(values), 2) if values else None
        return {"workers": len(stats), "consumers_max": most("consumers"),
                "rss_bytes_max": most("rss_bytes"), "rss_bytes_per_consumer":
                per_consumer("rss_bytes"), "open_files_max": most("open_files"),
                "open_files_per_consumer": per_consumer("open_files"),
                "timers_max": most("timers"), "timers_per_consumer": per_consumer("timers"),
                "reactor_late_s_max": most("late_s")}

    def rebalance_events(self) -> list[dict[str, Any]]:
        out = []
        for g, gens in self.generations.items():
            for gen, (start, end) in sorted(gens.items()):
                if start is not None and end is not None and end >= start:
                    out.append({"group": g, "generation": gen, "end_t": round(end, 3),
                                "duration_s": round(end - start, 4)})
        return out


def percentiles(values: list[float]) -> dict[str, float | None]:
    """Count, p50, p90, p99 and max of ``values`` (nearest rank); None for each when empty."""
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


class _Disturbances:
    """The run's scheduled disturbances, each done once when its time comes: ``kill -9`` of the
    last ``kill_share`` of the workers at ``kill_at_s``, SIGSTOP of the first ``pause_share`` at
    ``pause_at_s`` and SIGCONT ``pause_for_s`` later (the last workers are killed so that a
    pause, which takes the first, hits others). Each is logged in ``actions``."""

    def __init__(self, cfg: LoadTestConfig, workers: list[_Worker], tracker: _Tracker,
                 actions: list[dict[str, Any]]) -> None:
        self.cfg = cfg
        self.workers = workers
        self.tracker = tracker
        self.actions = actions
        self.killed = self.paused = self.resumed = False
        #: Workers stopped by SIGSTOP (continued at the end even if the run ends first).
        self.paused_workers: list[_Worker] = []

    def _share(self, share: float) -> int:
        return max(1, round(share * len(self.workers)))

    def _log(self, now: float, what: str) -> None:
        self.actions.append({"t": round(now, 3), "what": what})

    def due(self, now: float) -> None:
        """Do every disturbance whose time has come by ``now`` (seconds into the run)."""
        cfg = self.cfg
        if cfg.kill_share > 0 and not self.killed and now >= cfg.kill_at_s:
            self.killed = True
            victims = self.workers[-self._share(cfg.kill_share):]
            for w in victims:
                w.signal(signal.SIGKILL)
                for c, _ in w.members:
                    self.tracker.feed({"ev": "killed", "c": c, "t": time.time()})
            self._log(now, f"kill -9 {len(victims)} workers "
                      f"({sum(len(w.members) for w in victims)} consumers)")
        if cfg.pause_share > 0 and not self.paused and now >= cfg.pause_at_s:
            self.paused = True
            self.paused_workers = self.workers[:self._share(cfg.pause_share)]
            for w in self.paused_workers:
                w.signal(signal.SIGSTOP)
                self.tracker.disturbed.update(c for c, _ in w.members)
            self._log(now, f"SIGSTOP {len(self.paused_workers)} workers "
                      f"({sum(len(w.members) for w in self.paused_workers)} consumers)")
        if self.paused and not self.resumed and now >= cfg.pause_at_s + cfg.pause_for_s:
            self.resumed = True
            for w in self.paused_workers:
                w.signal(signal.SIGCONT)
            self._log(now, "SIGCONT")


def _stop_workers(cfg: LoadTestConfig, workers: list[_Worker], paused: list[_Worker],
                  events: queue.Queue, tracker: _Tracker) -> None:
    """End the run's workers and take their last events."""
    # Members stopped at the end leave with UnregisterConsumer: the coordinator counts them
    # as leaves, not expirations, so the figures go on to the final scrape.
    for w in paused:
        w.signal(signal.SIGCONT)
    # Every worker closes its consumers at once: one after the other, the last ones would
    # go on pinging for as long as the others take to close.
    for w in workers:
        w.stop()
    # a worker gives up on closing after a session timeout and 5 s (worker.stop)
    deadline = time.monotonic() + cfg.session_timeout_ms / 1000 + 10.0
    for w in workers:
        w.wait(deadline)
    try:
        while True:
            tracker.feed(events.get_nowait())
    except queue.Empty:
        pass


def run(cfg: LoadTestConfig, out: TextIO = sys.stderr) -> dict[str, Any]:
    """Run one load test; returns the result (also written to ``out_dir``)."""
    cfg.check()
    _ensure_topic(cfg)
    events: queue.Queue = queue.Queue()
    t0 = time.time()
    tracker = _Tracker(t0)
    actions: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    scrapes: list[Scrape] = []
    # The baseline, before any consumer exists: the run's counters count from it, and the
    # first point of the run already has a window for its rates.
    timeline.append(_sample(cfg, tracker, scrapes, time.time() - t0))
    plan = plan_workers(cfg)
    workers = [_Worker(i, members, cfg, events) for i, members in enumerate(plan)]
    disturbances = _Disturbances(cfg, workers, tracker, actions)
    next_scrape = time.time() - t0 + cfg.scrape_interval_s
    try:
        while True:
            drain(events, tracker, 0.2)
            now = time.time() - t0
            disturbances.due(now)
            if now >= next_scrape:
                next_scrape = now + cfg.scrape_interval_s
                timeline.append(_sample(cfg, tracker, scrapes, now))
                if cfg.progress:
                    _progress(out, cfg, tracker, now, timeline[-1])
            if now >= cfg.duration_s or len(tracker.exited) == len(workers):
                break
    finally:
        _stop_workers(cfg, workers, disturbances.paused_workers, events, tracker)
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


def _sample(cfg: LoadTestConfig, tracker: _Tracker, scrapes: list[Scrape],
            now: float) -> dict[str, Any]:
    """One timeline point: the workers' counts, every broker's figures (``brokers``, by id)
    and the cluster's (members, expirations and leaves summed; ping round trips from the
    brokers' histograms summed over the interval). A broker that does not answer is left out
    of this point."""
    point: dict[str, Any] = {"t": round(now, 3), "registered": len(tracker.registered),
                             "owning": len(tracker.owning)}
    brokers: dict[int, dict[str, Any]] = {}
    windows: list[prom.Histogram | None] = []
    for bid, url in sorted(cfg.metrics_urls.items()):
        try:
            samples = prom.scrape(url)
        except OSError:
            continue
        prev = next((s for s in reversed(scrapes) if s[1] == bid), None)
        baseline = next((s for s in scrapes if s[1] == bid), None)
        scrapes.append((now, bid, samples))
        brokers[bid] = scrape_figures(samples, now, prev, baseline)
        if prev is not None:
            windows.append(_ping_window(samples, prev[2]))
    if not brokers:
        return point
    point["brokers"] = brokers
    for key in ("members", "expirations", "leaves"):
        point[key] = sum(b.get(key) or 0.0 for b in brokers.values())
    pings = summed(windows)
    if pings is not None:
        point.update(_ping_point(pings))
    return point


def summed(histograms: list[prom.Histogram | None]) -> prom.Histogram | None:
    """The brokers' histograms as one (None without any, or when their buckets differ, as
    between two versions during an upgrade: no cluster-wide figure then)."""
    out: prom.Histogram | None = None
    for h in histograms:
        if h is None:
            continue
        try:
            out = h if out is None else out.plus(h)
        except ValueError:
            return None
    return out


def _ping_window(samples: prom.Samples, before: prom.Samples) -> prom.Histogram | None:
    h = prom.histogram(samples, PING_RTT)
    return None if h is None else h.minus(prom.histogram(before, PING_RTT))


def _ping_point(window: prom.Histogram) -> dict[str, Any]:
    out: dict[str, Any] = {"ping_count": window.count}
    for q, key in ((0.5, "ping_p50_ms"), (0.99, "ping_p99_ms")):
        v = window.quantile(q)
        out[key] = None if v is None else round(v * 1000, 3)
    return out



def scrape_figures(samples: prom.Samples, now: float, prev: Scrape | None,
                   baseline: Scrape | None) -> dict[str, Any]:
    """One broker's figures at one timeline point, from a scrape taken at ``now``.

    Counters are counted from ``baseline`` (the run's first scrape of this broker; None:
    this is it), so a broker's earlier history (the counters run since it started) is not
    the run's: the expired and left members count from 0, each member once, and the last
    point's counts are the summary's. Rates (CPU, ping round trips) are over the window since
    ``prev``, the previous scrape of the same broker; the driver takes one scrape before any
    worker starts, so every point of the run has one. Members are summed over their label
    sets (one per shard where the coordinator is sharded)."""
    shards, shard_ids = shards_of(samples)
    out: dict[str, Any] = {
        "rss_bytes": prom.value(samples, "process_resident_memory_bytes"),
        "members": prom.value(samples, "sluice_coordinator_members"),
        "shards_active": shards, "shards": shard_ids}
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
    window = _ping_window(samples, prev[2])
    if window is not None:
        out.update(_ping_point(window))
    return out


def _progress(out: TextIO, cfg: LoadTestConfig, tracker: _Tracker, now: float,
              point: dict[str, Any]) -> None:
    width = 30
    done = min(1.0, now / cfg.duration_s)
    bar = "#" * int(done * width) + "-" * (width - int(done * width))
    cpus = [b["cpu_percent"] for b in point.get("brokers", {}).values()
            if b.get("cpu_percent") is not None]
    extra = f" busiest broker cpu {max(cpus)}%" if cpus else ""
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
        "join_time_s": percentiles(list(tracker.joined.values())),
        "rebalances": {"events": rebalances,
                       "duration_s": percentiles([r["duration_s"] for r in rebalances])},
        "memberships_lost": sum(tracker.lost.values()),
        "false_expirations": len(false_expirations),
        "false_expiration_ids": false_expirations[:50],
        "errors": tracker.errors[:50],
        "actions": actions,
        "timeline": timeline,
        "worker_stderr": {w.index: w.stderr_tail for w in workers if w.stderr_tail},
    }
    result["rebalances"]["per_group"] = rebalances_per_group(
        rebalances, {g for w in workers for _, g in w.members} | set(tracker.generations))
    result["workers"] = tracker.worker_figures()
    brokers = sorted({bid for _, bid, _ in scrapes})
    result["brokers"] = {bid: broker_summary(
        [s for s in scrapes if s[1] == bid], timeline, bid, cfg.ramp_s) for bid in brokers}
    if brokers:
        result["coordination"] = coordination_summary(scrapes)
    return result


def rebalances_per_group(events: list[dict[str, Any]], groups: set[str]) -> dict[str, Any]:
    """How many rebalances each group went through (its first assignment counts: it is the
    group's first rebalance), as a distribution over ``groups`` (a group without any counts
    0): percentiles and ``{rebalances: groups}``."""
    counts = dict.fromkeys(groups, 0)
    for r in events:
        counts[r["group"]] = counts.get(r["group"], 0) + 1
    spread: dict[int, int] = {}
    for n in counts.values():
        spread[n] = spread.get(n, 0) + 1
    return {**percentiles([float(n) for n in counts.values()]),
            "groups_by_count": dict(sorted(spread.items()))}


def broker_summary(scrapes: list[Scrape], timeline: list[dict[str, Any]], bid: int,
                   ramp_s: float) -> dict[str, Any]:
    """One broker's figures over the run, from its scrapes (time order) and the timeline's
    points of it: counters are the difference between its first and last scrape (a broker
    restarted during the run restarts its counters: the run's figures are then too low)."""
    first, last = scrapes[0][2], scrapes[-1][2]
    points = [(p["t"], p["brokers"][bid]) for p in timeline if bid in p.get("brokers", {})]
    cpu = [b["cpu_percent"] for _, b in points if b.get("cpu_percent") is not None]
    rss = [b["rss_bytes"] for _, b in points if b.get("rss_bytes") is not None]
    members = [b["members"] for _, b in points if b.get("members") is not None]
    shards = [b["shards_active"] for _, b in points if b.get("shards_active") is not None]

    def delta(name: str) -> float:
        # a labelled counter has no sample until its first increment: absent counts as 0
        return (prom.value(last, name) or 0.0) - (prom.value(first, name) or 0.0)

    hot = longest_hot_stretch([(t, b.get("cpu_percent")) for t, b in points], ramp_s)
    shards_end, shard_ids = shards_of(last)
    return {
        "broker_id": bid,
        "shards_active": shards_end, "shards_active_max": max(shards) if shards else None,
        "shards": shard_ids,
        "members_max": max(members) if members else None,
        "members_end": members[-1] if members else None,
        "cpu_seconds": delta("process_cpu_seconds_total"),
        "cpu_percent_mean": round(sum(cpu) / len(cpu), 1) if cpu else None,
        "cpu_percent_max": max(cpu) if cpu else None,
        "cpu_hot_longest_s": hot, "cpu_hot_over_limit": hot > HOT_STRETCH_LIMIT_S,
        "rss_bytes_max": max(rss) if rss else None,
        "rss_bytes_end": rss[-1] if rss else None,
        "expirations": delta("sluice_coordinator_expired_members_total"),
        "leaves": delta("sluice_coordinator_left_members_total"),
        "failed_pings": delta("sluice_coordinator_failed_pings_total"),
    }


def coordination_summary(scrapes: list[Scrape]) -> dict[str, Any]:
    """The cluster's coordination over the run: each broker's counters and histograms from its
    first to its last scrape, summed over the brokers (groups coordinated anywhere count
    once: each is coordinated by one broker at a time)."""
    totals = dict.fromkeys(("expirations", "leaves", "failed_pings"), 0.0)
    names = {"expirations": "sluice_coordinator_expired_members_total",
             "leaves": "sluice_coordinator_left_members_total",
             "failed_pings": "sluice_coordinator_failed_pings_total"}
    windows: dict[str, list[prom.Histogram | None]] = {PING_RTT: [], REBALANCE_DURATION: []}
    for bid in sorted({b for _, b, _ in scrapes}):
        mine = [s for s in scrapes if s[1] == bid]
        first, last = mine[0][2], mine[-1][2]
        for key, name in names.items():
            totals[key] += (prom.value(last, name) or 0.0) - (prom.value(first, name) or 0.0)
        for metric, found in windows.items():
            h = prom.histogram(last, metric)
            found.append(None if h is None else h.minus(prom.histogram(first, metric)))
    ping, reb = summed(windows[PING_RTT]), summed(windows[REBALANCE_DURATION])
    return {
        **totals,
        "ping_round_trip_s": None if ping is None else {
            "count": ping.count, "mean": ping.mean, "p50": ping.quantile(0.5),
            "p99": ping.quantile(0.99), "p999": ping.quantile(0.999)},
        "rebalance_duration_s": None if reb is None else {
            "count": reb.count, "mean": reb.mean, "p50": reb.quantile(0.5),
            "p99": reb.quantile(0.99)},
    }

