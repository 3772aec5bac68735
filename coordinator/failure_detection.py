"""Failure detection of thin-client members (docs/design.md#failure-detection): a Ping every
session_timeout/3 to each consumer whose previous Ping was answered or expired, expiry after 2/3
of the session timeout, failure past ``coordinator.ping.max.failures`` expired Pings in a row or
when the channel closes; and the removal of a member that failed or left.

:class:`MemberFailures` is driven by the coordinator's
:class:`~coordinator.heartbeat.HeartbeatScheduler` (:meth:`MemberFailures.ping_due`) and acts
through its :class:`~coordinator.service.CoordinatorService`; it keeps no state of its own (a
member's Ping state lives on its :class:`~coordinator.registry.ConsumerRegistry`).

Invariants:

- no Ping is sent while the coordinator cannot act, and at most one is outstanding per member;
- while SUSPENDED no member is failed for unanswered Pings (the coordinator may be the one cut
  off);
- a member's scheduler entry, channel and registry entry go together: removal drops all three,
  and the first removal wins (:meth:`MemberFailures.remove_member` is idempotent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from broker_core.wire.apis import ApiKey
from coordinator import purgatories
from coordinator.registry import ConsumerRegistry

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator")


class MemberFailures:
    """See the module docstring; ``service`` is the coordinator whose members it watches."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service

    def ping_due(self, key: Any) -> None:
        c = self.service.registries.member(*key)
        if c is None or not c.alive:
            self.service.scheduler.remove(key)
            return
        if not self.service.can_act() or c.ping_outstanding:
            return
        c.ping_outstanding = True
        c.ping_seq += 1
        sent = self.service.clock.seconds()
        req = c.channel.request(ApiKey.PING, 0, {"consumer_id": c.consumer_id,
                                                 "num_retries": c.failed_pings})
        req.addCallback(self._ping_answered, c, sent)
        d = purgatories.watch(self.service.ping_purgatory, c.key, c.response_timeout_s, req)
        d.addCallback(self._ping_outcome, c, c.ping_seq)

    def _ping_answered(self, body: Any, c: ConsumerRegistry, sent: float) -> Any:
        if not c.alive:
            return body
        if self.service.metrics is not None:
            self.service.metrics.coordinator_ping_rtt_seconds.observe(self.service.clock.seconds() - sent)
        # Any answer, even a late one, shows the consumer is alive.
        c.failed_pings = 0
        if body.error_code == 0 and body.offsets:
            g = self.service.registries.groups.get(c.group_id)
            if g is not None:
                g.record_offsets(c, ((o.topic, o.partition, o.offset) for o in body.offsets))
        return body

    def _ping_outcome(self, outcome: purgatories.Outcome, c: ConsumerRegistry, seq: int) -> None:
        if seq == c.ping_seq:
            c.ping_outstanding = False
        if not c.alive or not self.service.active:
            return
        if outcome.kind == purgatories.LOST:
            self.handle_consumer_failure(c, "disconnect")
            return
        if outcome.ok:
            return
        if self.service.elector.suspended:
            return  # we may be the slow one; do not fail consumers while cut off
        c.failed_pings += 1
        if self.service.metrics is not None:
            self.service.metrics.coordinator_failed_pings_total.inc()
        log.info("ping to consumer {c} of group {g} failed ({n} in a row): {d}",
                 c=c.consumer_id, g=c.group_id, n=c.failed_pings, d=outcome.detail)
        if c.failed_pings > self.service.config.ping_max_failures:
            self.handle_consumer_failure(c, "ping")
        else:
            # Retry at once rather than at the next tick, so a consumer that stopped
            # answering is failed about (max failures + 1) x 2/3 session timeouts after its
            # first unanswered Ping, not later.
            self.ping_due(c.key)

    def handle_consumer_failure(self, c: ConsumerRegistry, reason: str) -> None:
        """``handleConsumerFailure``: unschedule, close, remove, fail an ongoing rebalance
        fast, rebalance the rest. Idempotent."""
        self.remove_member(c, reason, left=False)

    def remove_member(self, c: ConsumerRegistry, reason: str, *, left: bool) -> None:
        """Unschedule, close the channel, remove, fail an ongoing rebalance fast, rebalance
        the rest. ``left``: the member asked to leave (counted apart from failures, so that
        expirations count only members the coordinator had to give up on). Idempotent: the
        first removal wins (a channel closing after a leave changes nothing)."""
        if not c.alive:
            return
        c.alive = False
        self.service.scheduler.remove(c.key)
        if c.channel is not None:
            if left:
                # The member closes its channel once it has our answer (closing it first
                # would race the answer, which travels on another connection); one that
                # does not is closed after the time it had to answer any request.
                channel = c.channel
                self.service.clock.callLater(c.response_timeout_s, channel.close)
            else:
                c.channel.close()
        if not self.service.active:
            return
        g = self.service.registries.remove_member(c, self.service.clock.seconds())
        if g is None:
            return
        what = "left" if left else f"failed ({reason})"
        log.info("consumer {c} of group {g} {w}; {n} members left", c=c.consumer_id,
                 g=g.group_id, w=what, n=len(g.members))
        if self.service.metrics is not None:
            if left:
                self.service.metrics.coordinator_left_members_total.inc()
            else:
                self.service.metrics.coordinator_expired_members_total.labels(reason=reason).inc()
        if g.rebalancing:
            g.rebalance_failed = f"member {c.consumer_id} {what}"
        self.service.request_rebalance(g)
