"""Raft drivers joined by an in-process loopback transport on task.Clock (the driver's unit
tests and the quorum tests built on them).
"""

from __future__ import annotations

from twisted.internet import task
from zope.interface import implementer

from broker_core.raft import RaftConfig, Role
from broker_core.raft.driver import IRaftTransport, RaftDriver
from broker_core.raft.messages import Envelope
from broker_core.raft.quorum_state import (
    read_quorum_state,
)

CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, election_backoff_max_ms=100,
                    request_timeout_ms=150, retry_backoff_ms=10, fetch_max_wait_ms=50)


class Loopback:
    """Delivers envelopes between drivers after ``delay`` seconds of the clock (or at once,
    inside ``send``, when ``delay`` is None). Nodes in ``isolated`` neither send nor receive.
    Records, for every envelope handed over, the sender's quorum state as read from disk at
    that moment."""

    def __init__(self, clock: task.Clock, delay: float | None = 0.001) -> None:
        self.clock = clock
        self.delay = delay
        self.drivers: dict[int, RaftDriver] = {}
        self.isolated: set[int] = set()
        self.handed: list[tuple[Envelope, object]] = []

    def transport_for(self, node_id: int) -> _NodeTransport:
        return _NodeTransport(self, node_id)

    def _send(self, env: Envelope) -> None:
        sender = self.drivers[env.source]
        self.handed.append((env, read_quorum_state(sender.data_dir)))
        if env.source in self.isolated or env.destination in self.isolated:
            return
        target = self.drivers.get(env.destination)
        if target is None:
            return
        if self.delay is None:
            target.receive(env)
        else:
            self.clock.callLater(self.delay, target.receive, env)


@implementer(IRaftTransport)
class _NodeTransport:
    def __init__(self, loop: Loopback, node_id: int) -> None:
        self.loop = loop
        self.node_id = node_id

    def send(self, envelope: Envelope) -> None:
        assert envelope.source == self.node_id
        self.loop._send(envelope)


def run_until(clock: task.Clock, done, within_s: float, step_s: float = 0.005) -> None:
    waited = 0.0
    while not done():
        if waited > within_s:
            raise AssertionError(f"condition not met within {within_s}s of clock time")
        clock.advance(step_s)
        waited += step_s


def leader_of(drivers: dict[int, RaftDriver]) -> RaftDriver | None:
    leaders = [d for d in drivers.values() if d.role is Role.LEADER]
    return leaders[0] if len(leaders) == 1 else None


