"""One load-test worker process: its share of the consumers on one reactor.

Started by :mod:`sluice_tools.loadtest.driver` as ``python -m sluice_tools.loadtest.worker``;
its spec comes first on stdin (its length in bytes on a line, then the JSON). Each consumer is
a real :class:`~consumer_client.consumer.Consumer` (own coordinator channel, own session); they
share one :class:`~consumer_client.cluster.ClusterClient` for metadata and fetches, as an
application running many consumers in one process would.

Every state change becomes a JSON line on stdout (``started``, ``registered``, ``assigned``
with the generation and partition count, ``revoked``, ``lost`` when a registered member has to
find its coordinator again, ``error``); the driver folds them into its figures. Every
:data:`STATS_INTERVAL_S` a ``stats`` line says what the process costs: consumers started,
resident memory, open files, pending timers, and how late that report's own timer fired (a
late timer is a reactor too busy for its consumers' pings).

Scale: the consumers are started by one timer that re-arms itself for the next one due (not
one timer per consumer), the process raises its open-files limit to the hard limit (each
consumer holds its coordinator channel's socket) and says so, as an ``error`` line, when the
limit is too low for its consumers. Commands arrive
as JSON lines on stdin: ``{"cmd": "stop"}`` closes every consumer (handing positions over) and
exits.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import sys
import time
from typing import Any

from twisted.internet import defer, stdio
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.protocols.basic import LineReceiver

REGISTERED_STATES = ("waiting_for_assignment", "fetching", "stopped")
STATS_INTERVAL_S = 5.0
#: Open files a worker needs besides its consumers' (stdio, the shared cluster client's
#: connections to the brokers, the interpreter's own).
SPARE_FILES = 64


class _Control(LineReceiver):
    delimiter = b"\n"

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def lineReceived(self, line: bytes) -> None:  # noqa: N802 (Twisted API)
        try:
            cmd = json.loads(line)
        except ValueError:
            return
        if cmd.get("cmd") == "stop":
            self.worker.stop()

    def connectionLost(self, reason: Any = None) -> None:  # noqa: N802 (Twisted API)
        # The driver went away: do not linger as an orphan.
        self.worker.stop()


class Worker:
    def __init__(self, spec: dict[str, Any], reactor: Any) -> None:
        self.spec = spec
        self.reactor = reactor
        self.consumers: list[Any] = []
        self.control = _Control(self)
        self._stopping = False

    def emit(self, **event: Any) -> None:
        event["t"] = time.time()
        self.control.transport.write(json.dumps(event).encode() + b"\n")

    def start(self) -> None:
        from consumer_client.cluster import ClusterClient
        from sluice_tools.loadtest.driver import security_of

        spec = self.spec
        self.security = security_of(spec.get("command_config"))
        self.cluster = ClusterClient(spec["bootstrap_servers"], reactor=self.reactor,
                                     client_id=f"loadtest-w{spec['worker']}",
                                     security=self.security)
        self._started_at = self.reactor.seconds()
        self._next = 0
        self._start_due()
        self._stats_due = self.reactor.seconds() + STATS_INTERVAL_S
        self.reactor.callLater(STATS_INTERVAL_S, self._stats)

    def _due(self, i: int) -> float:
        """Seconds after the start at which consumer ``i`` starts: spread over the ramp."""
        return float(self.spec.get("ramp_s", 0.0)) * i / max(1, len(self.spec["members"]))

    def _start_due(self) -> None:
        # One timer for the whole ramp: tens of thousands of pending calls would make every
        # timer operation of the reactor slower for all the consumers already running.
        members = self.spec["members"]
        now = self.reactor.seconds() - self._started_at
        while self._next < len(members) and self._due(self._next) <= now:
            cid, group = members[self._next]
            self._next += 1
            self._start_one(cid, group)
        if self._next < len(members) and not self._stopping:
            self.reactor.callLater(max(0.0, self._due(self._next) - now), self._start_due)

    def _stats(self) -> None:
        if self._stopping:
            return
        late = max(0.0, self.reactor.seconds() - self._stats_due)
        _settle_heap()
        # Due from after the collection: the next report's lateness is the consumers' doing,
        # not this collection's.
        self._stats_due = self.reactor.seconds() + STATS_INTERVAL_S
        self.emit(ev="stats", consumers=len(self.consumers), rss_bytes=_rss_bytes(),
                  open_files=_open_files(), timers=len(self.reactor.getDelayedCalls()),
                  late_s=round(late, 3))
        self.reactor.callLater(STATS_INTERVAL_S, self._stats)

    def _start_one(self, cid: str, group: str) -> None:
        from consumer_client.consumer import Consumer

        if self._stopping:
            return
        config = consumer_config(self.spec, cid, group, self.security)
        consumer = Consumer(config, reactor=self.reactor, cluster=self.cluster)
        previous = {"state": None}

        def changed(member: Any) -> None:
            state = member.state.value
            before, previous["state"] = previous["state"], state
            if state == "waiting_for_assignment" and before == "registering":
                self.emit(ev="registered", c=cid, g=group)
            elif state == "fetching":
                self.emit(ev="assigned", c=cid, g=group, gen=member.generation,
                          parts=len(member.assignment))
            elif state == "stopped":
                self.emit(ev="revoked", c=cid, g=group)
            elif state in ("discovering", "registering") and before in REGISTERED_STATES:
                self.emit(ev="lost", c=cid, g=group, why=member.last_error)
            elif state == "failed":
                self.emit(ev="error", c=cid, g=group, why=member.last_error)

        consumer.on_state_change(changed)
        self.consumers.append(consumer)
        self.emit(ev="started", c=cid, g=group)
        consumer.start()
        d = consumer.consume(lambda message: None)
        d.addErrback(lambda f: self.emit(ev="error", c=cid, g=group, why=str(f.value)))

    def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        d = defer.DeferredList([c.close() for c in self.consumers], consumeErrors=True)
        timeout = self.spec["session_timeout_ms"] / 1000.0 + 5
        d.addTimeout(timeout, self.reactor)
        d.addBoth(lambda _: self._exit())

    def _exit(self) -> None:
        self.cluster.close()
        if self.reactor.running:
            self.reactor.stop()


def consumer_config(spec: dict[str, Any], cid: str, group: str, security: Any) -> Any:
    """The configuration of consumer ``cid`` of ``group`` from the worker's ``spec``: one
    stream over the spec's topic, starting at the end of a partition with no committed offset."""
    from consumer_client.consumer import ConsumerConfig

    return dataclasses.replace(ConsumerConfig.create(
        bootstrap_servers=spec["bootstrap_servers"], group_id=group, consumer_id=cid,
        topics={spec["topic"]: 1}, session_timeout_ms=spec["session_timeout_ms"],
        fetch_max_wait_ms=spec["fetch_max_wait_ms"], auto_offset_reset="largest"),
        security=security)


def _settle_heap() -> None:
    """Collect what became cyclic garbage since the last call, then freeze every object left
    (``gc.freeze``): the collector skips frozen objects from then on.

    Why: during a ramp the heap grows by thousands of consumers a minute, and CPython runs a
    full collection each time it has grown by a quarter; each walked every consumer started so
    far (py-spy: a tenth of a 2,500-consumer worker during the 30,000-consumer ramp, on the
    allocating lines). The consumers live until the worker exits, so walking them again finds
    nothing. The cost: a cycle that forms among objects already frozen (a consumer closed
    during the run, a Deferred chain or channel in flight at the freeze and dropped later)
    stays until the worker exits. A load-test worker can afford that, but its resident memory
    in a run with kills, pauses or failovers may be higher by that much."""
    gc.collect()
    gc.freeze()


def _raise_open_files_limit() -> int:
    """Raise the soft open-files limit to the hard one (thousands of consumers hold thousands
    of sockets); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)


def _rss_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc``), None where unreadable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _open_files() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


#: The largest spec a worker reads: a million members' ids fit many times over.
MAX_SPEC_BYTES = 256 * 2**20


def read_spec(fd: int) -> dict[str, Any]:
    """The spec at the start of ``fd``: a length line, then that many bytes of JSON. Read with
    ``os.read`` (unbuffered), so nothing after it is taken from the reactor's reads."""
    digits = b""
    while not digits.endswith(b"\n"):
        b = os.read(fd, 1)
        if not b or len(digits) > 12:
            raise SystemExit("loadtest worker: no spec length on stdin")
        digits += b
    if not digits.strip().isdigit():
        raise SystemExit("loadtest worker: no spec length on stdin")
    n = int(digits)
    if not 0 < n <= MAX_SPEC_BYTES:
        raise SystemExit(f"loadtest worker: a spec of {n} bytes is out of bounds")
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise SystemExit("loadtest worker: stdin closed inside the spec")
        data += chunk
    return json.loads(data)


def main(argv: list[str]) -> int:
    from twisted.internet import reactor

    from broker_core.tap import BROKER_GC_THRESHOLDS

    # Thousands of consumers are thousands of long-lived objects, and each Fetch answer
    # decoded allocates more: at CPython's default thresholds (700, 10, 10) collections ran
    # so often that py-spy put nearly half of a 2,500-consumer worker's time on the allocating
    # lines, and its reactor fell seconds behind its consumers' pings. The brokers' thresholds
    # fit the same shape of heap (cycles are rare; reference counting frees the rest).
    gc.set_threshold(*BROKER_GC_THRESHOLDS)
    # The consumers' warnings and errors to stderr, whose end the driver keeps and shows when
    # a worker fails; below that, nothing. (Without a destination they went to Twisted's
    # start-up buffer, never to be seen.)
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(textFileLogObserver(sys.stderr),
                              [LogLevelFilterPredicate(LogLevel.warn)])],
        redirectStandardIO=False)
    spec = read_spec(sys.stdin.fileno())
    limit = _raise_open_files_limit()
    worker = Worker(spec, reactor)
    stdio.StandardIO(worker.control, reactor=reactor)
    need = len(spec["members"]) + SPARE_FILES
    if need > limit:
        reactor.callWhenRunning(
            worker.emit, ev="error", c=None, g=None,
            why=f"open-files limit {limit} is below the {need} this worker's "
                f"{len(spec['members'])} consumers need: use more --processes or raise "
                "the hard limit (ulimit -Hn)")
    reactor.callWhenRunning(worker.start)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
