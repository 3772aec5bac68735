"""One load-test worker process: its share of the consumers on one reactor.

Started by :mod:`sluice_tools.loadtest.driver` as ``python -m sluice_tools.loadtest.worker
SPEC_JSON``. Each consumer is a real :class:`~consumer_client.consumer.Consumer` (own coordinator
channel, own session); they share one :class:`~consumer_client.cluster.ClusterClient` for
metadata and fetches, as an application running many consumers in one process would.

Every state change becomes a JSON line on stdout (``started``, ``registered``, ``assigned``
with the generation and partition count, ``revoked``, ``lost`` when a registered member has to
find its coordinator again, ``error``); the driver folds them into its figures. Commands arrive
as JSON lines on stdin: ``{"cmd": "stop"}`` closes every consumer (handing positions over) and
exits.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time
from typing import Any

from twisted.internet import defer, stdio
from twisted.protocols.basic import LineReceiver

REGISTERED_STATES = ("waiting_for_assignment", "fetching", "stopped")


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
        members = spec["members"]
        ramp = float(spec.get("ramp_s", 0.0))
        for i, (cid, group) in enumerate(members):
            delay = ramp * i / max(1, len(members))
            self.reactor.callLater(delay, self._start_one, cid, group)

    def _start_one(self, cid: str, group: str) -> None:
        from consumer_client.consumer import Consumer, ConsumerConfig

        if self._stopping:
            return
        spec = self.spec
        config = dataclasses.replace(ConsumerConfig.create(
            bootstrap_servers=spec["bootstrap_servers"], group_id=group, consumer_id=cid,
            topics={spec["topic"]: 1}, session_timeout_ms=spec["session_timeout_ms"],
            auto_offset_reset="largest"), security=self.security)
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


def _raise_open_files_limit() -> None:
    # thousands of consumers hold thousands of sockets
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str]) -> int:
    from twisted.internet import reactor

    spec = json.loads(argv[1])
    _raise_open_files_limit()
    worker = Worker(spec, reactor)
    stdio.StandardIO(worker.control, reactor=reactor)
    reactor.callWhenRunning(worker.start)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
