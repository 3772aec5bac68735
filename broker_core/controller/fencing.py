"""The active controller's fencing agent: the I/O around
:class:`~broker_core.controller.broker_liveness.BrokerLiveness`.

It answers BrokerHeartbeat, looks at the liveness table every ``broker.heartbeat.interval.ms``,
and turns what it finds into controller events (so they are ordered with every other change):

- brokers newly fenced or unfenced: the broker-change procedure runs again, judging every
  partition against the registered, *unfenced* brokers (a fenced leader is replaced from its
  ISR, a fenced follower leaves the ISRs; an unfenced broker is sent its whole state, as a
  restarted one is);
- the controller isolated (it hears from too few brokers to fence anyone): it reads the
  brokers' "cannot reach the controller" records from the metadata store and resigns when
  :func:`~broker_core.controller.broker_liveness.should_resign` says so. It then deletes
  ``/controller`` (the other brokers elect one of themselves) and stays out of elections for a
  session, so that it does not win back the controllership the others cannot reach.

Invariant: the agent acts only while the controller is active (``start`` on taking over,
``stop`` on resigning).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import task
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller.broker_liveness import (
    BrokerLiveness,
    UnreachableVote,
    should_resign,
    unreachable_predecessor,
)
from broker_core.metadata import MetadataStoreError, NoNode


class FencingAgent:
    """See the module docstring. ``controller`` is the :class:`Controller` it serves."""

    log = Logger(namespace="sluice.controller.fencing")

    def __init__(self, controller: Any, *, heartbeat_interval_s: float,
                 session_timeout_s: float, clock: Any) -> None:
        self.controller = controller
        self.heartbeat_interval_s = heartbeat_interval_s
        self.session_timeout_s = session_timeout_s
        self.clock = clock
        self.liveness = BrokerLiveness(controller.broker_id, session_timeout_s, clock)
        self._loop: task.LoopingCall | None = None
        self._checking_isolation = False
        self._last_tick = clock.seconds()
        #: Until when this broker stays out of controller elections (it resigned because the
        #: others cannot reach it).
        self.abstain_until = 0.0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, registered: Any) -> None:
        """The controller took over with ``registered`` brokers: fresh sessions for all."""
        self.liveness.reset(registered)
        self.stop()
        self._last_tick = self.clock.seconds()
        self._loop = task.LoopingCall(self.tick)
        self._loop.clock = self.clock
        self._loop.start(self.heartbeat_interval_s, now=False)

    async def inherit(self) -> None:
        """Right after :meth:`start`: fence at once a predecessor most brokers recorded they
        could not reach (it is most likely still cut off: a fresh session would only prolong
        the stall of its partitions). Read first thing on taking over, before the brokers that
        recorded it reach this controller and delete their records."""
        c = self.controller
        if not c.active:
            return
        votes = await self._read_votes()
        for b in unreachable_predecessor(c.broker_id, c.epoch, c.context.live, votes):
            self.log.warn("broker {b}, the previous controller, could not be reached by most "
                          "brokers: counted as silent for a session already", b=b)
            self.liveness.presume_silent(b)
        self.tick()

    def may_shrink_isr(self) -> bool:
        """Whether ISR shrinks may be accepted: not while isolated (see broker_liveness)."""
        return self.liveness.hears_majority()

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def may_stand(self) -> bool:
        """Whether this broker may stand for controller election now."""
        return self.clock.seconds() >= self.abstain_until

    # -- heartbeats ------------------------------------------------------------------------------

    def heartbeat(self, broker_id: int, broker_epoch: int) -> tuple[str | None, bool]:
        """Answer one BrokerHeartbeat: an error name (NOT_CONTROLLER, STALE_BROKER_EPOCH: not
        the registration we hold) or None, and whether the broker is fenced."""
        c = self.controller
        if not c.active:
            return "NOT_CONTROLLER", True
        registered = c.context.live.get(broker_id)
        if registered is None or registered.epoch != broker_epoch:
            return "STALE_BROKER_EPOCH", True
        if self.liveness.heartbeat(broker_id):
            # Fenced until now: unfence it at once rather than at the next tick.
            self.tick()
        return None, self.liveness.is_fenced(broker_id)

    def tick(self) -> None:
        c = self.controller
        if not c.active:
            return
        now = self.clock.seconds()
        stalled = now - self._last_tick - self.heartbeat_interval_s
        self._last_tick = now
        if stalled > self.heartbeat_interval_s:
            # This process did not run: the heartbeats waiting to be read are not late.
            self.log.info("controller checks resumed {s:.1f}s late: brokers are credited that "
                          "time", s=stalled)
            self.liveness.credit(stalled)
        verdict = self.liveness.evaluate()
        if verdict.fence:
            self.log.warn("fencing broker(s) {b}: no heartbeat for {s}s while their metadata "
                          "sessions are alive", b=sorted(verdict.fence), s=self.session_timeout_s)
        if verdict.unfence:
            self.log.info("unfencing broker(s) {b}: heartbeats are back", b=sorted(verdict.unfence))
        if c.metrics is not None:
            c.metrics.fenced_brokers.set(len(self.liveness.fenced))
        if verdict.changed:
            unfenced = set(verdict.unfence)
            c.events.enqueue("broker_fencing",
                             lambda: c.broker_failover.on_broker_change(unfenced=unfenced))
        if verdict.isolated and not self._checking_isolation:
            self._checking_isolation = True
            c.events.enqueue("controller_isolation", self._check_isolation)

    # -- an isolated controller ------------------------------------------------------------------

    async def _check_isolation(self) -> None:
        self._checking_isolation = False
        c = self.controller
        if not c.active or self.liveness.hears_majority():
            return
        votes = await self._read_votes()
        if not c.active or not should_resign(c.broker_id, c.epoch, c.context.live, votes,
                                             isolated=not self.liveness.hears_majority()):
            return
        self.log.warn("controller {b} (epoch {e}) resigns: it has heard from too few brokers "
                      "for {s}s and brokers {v} cannot reach it", b=c.broker_id, e=c.epoch,
                      s=self.session_timeout_s, v=sorted(v.broker_id for v in votes))
        self.abstain_until = self.clock.seconds() + self.session_timeout_s
        await c._resign()
        try:
            data, stat = await c.store.get(paths.CONTROLLER)
            if paths.ControllerRegistration.from_bytes(data).broker_id == c.broker_id:
                await c.store.delete(paths.CONTROLLER, version=stat.version)
        except (MetadataStoreError, ValueError) as e:
            self.log.warn("could not give up /controller: {e}", e=e)
        # Stand again once the abstention ends, if nobody else took over by then.
        self.clock.callLater(self.session_timeout_s, c._on_abstention_over)

    async def _read_votes(self) -> list[UnreachableVote]:
        store = self.controller.store
        try:
            children = await store.get_children(paths.CONTROLLER_UNREACHABLE)
        except NoNode:
            return []
        ids = [int(ch) for ch in children if ch.isdigit() and len(ch) < 11]
        raw = await store.get_many([paths.controller_unreachable(b) for b in ids])
        votes = []
        for b, got in zip(ids, raw, strict=True):
            if got is None:
                continue
            try:
                votes.append(UnreachableVote.from_bytes(b, got[0]))
            except ValueError as e:
                self.log.warn("ignoring broker {b}'s controller-unreachable record: {e}", b=b,
                              e=e)
        return votes
