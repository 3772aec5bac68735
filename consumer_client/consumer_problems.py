"""What stands between a consumer and its messages, and who hears about it (the Twisted shell).

:class:`ProblemWatch` is the consumer's collaborator for its two kinds of problem: not
registered with a coordinator, and subscribed topics that do not exist. The decisions (which
problem exists, when to warn, when it becomes an error) are the sans-IO
:class:`~consumer_client.consumer_health.HealthTracker`'s; this class carries them out: it owns
the one health timer, asks the brokers about unassigned topics, logs the warnings, hands the
current error to the message sources, and tells the ``on_problem`` listeners.

Invariants: at most one health timer is armed, and none once the consumer is closed or failed;
``problem`` changes only in :meth:`ProblemWatch._update_problem`, which sets it on every source
before any reader is woken; every listener call sees the :class:`Health` of that moment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from broker_core.wire.errors import ErrorCode
from consumer_client.consumer_errors import (
    ConsumerError,
    ConsumerUnavailable,
    Health,
    TopicNotFound,
)
from consumer_client.consumer_health import HealthTracker
from consumer_client.consumer_streams import MessageSource
from consumer_client.membership import State

if TYPE_CHECKING:
    from consumer_client.consumer import Consumer


class ProblemWatch:
    """The consumer's problems: tracked, timed, warned about, raised to readers (see the
    module docstring). ``consumer`` is the facade whose state it reads."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        # Problems (no coordinator, missing topics): warned once per reason, raised to readers
        # after default.api.timeout.ms (see consumer_health).
        self.tracker = HealthTracker(consumer.config.default_api_timeout_ms / 1000.0)
        self._timer: Any = None
        self.problem: ConsumerError | None = None
        self._listeners: list[Callable[[Health], Any]] = []

    def add_listener(self, callback: Callable[[Health], Any]) -> None:
        self._listeners.append(callback)

    def health(self) -> Health:
        """See :class:`~consumer_client.consumer_errors.Health`."""
        c = self._consumer
        h = self.tracker
        error = c.error if isinstance(c.error, ConsumerError) else self.problem
        reason = None
        if error is not None:
            reason = str(error)
        elif h.unreachable_since is not None and c._started and not c.closed:
            reason = h.reason or "looking for the group's coordinator"
        elif h.missing:
            reason = (f"subscribed topics {', '.join(repr(t) for t in sorted(h.missing))} do not "
                      "exist (UNKNOWN_TOPIC_OR_PARTITION)")
        return Health(reason is None, reason, tuple(sorted(h.missing)), error)

    def attempt_failed(self, why: str, key: str) -> None:
        """A step towards registration failed (it is retried): remember why, warn once per
        kind of failure (and as a reminder while it lasts), never on every retry."""
        c = self._consumer
        c.last_error = why
        if self.tracker.failed_attempt(why, key, c.clock.seconds()):
            c.log.warn("{c}: cannot join group {g}: {why}; retrying (bootstrap servers "
                       "{s})", c=c.config.consumer_id, g=c.config.group_id, why=why,
                       s=c.config.bootstrap_servers)
            self.tell()
        else:
            c.log.debug("{c}: {why}", c=c.config.consumer_id, why=why)

    def membership_changed(self) -> None:
        """After a state change: registered or not, and whether anything is left to watch."""
        c = self._consumer
        s = c.state
        if s in (State.CLOSED, State.FAILED):
            self._stop_watching()
            return
        was_unreachable = self.tracker.unreachable_since is not None
        if c.membership.registered:
            warned = self.tracker.joined()
            if was_unreachable and self.problem is not None:
                self._update_problem()  # clears it, and tells the listeners
            elif warned:
                self.tell()
        elif s is State.DISCOVERING:
            self.tracker.lost(c.clock.seconds())
            self.watch()

    def check_topics(self) -> None:
        """After an assignment: ask the brokers about subscribed topics of which nothing was
        assigned to this member. Another member may own them all; only the brokers can tell
        whether the topic exists at all (the coordinator assigns what exists, silently)."""
        c = self._consumer
        if c.config.pattern != "static":
            return
        assigned = {t for t, _ in c.parts}
        unknown = sorted(t for t in c.config.topics if t not in assigned)
        if not unknown and not self.tracker.missing:
            return
        now = c.clock.seconds()
        if set(assigned) & set(self.tracker.missing):
            self.tracker.topics_checked(assigned, set(), now)
            self._topics_changed()
        if unknown:
            d = defer.Deferred.fromCoroutine(self._look_up_topics(unknown))
            d.addErrback(lambda f: c.log.failure("topic lookup failed", f))

    async def _look_up_topics(self, topics: list[str]) -> None:
        c = self._consumer
        try:
            view = await c.cluster.refresh(topics)
        except Exception as e:  # noqa: BLE001 - no answer says nothing about the topics
            c.log.debug("{c}: metadata for {t} failed: {e}", c=c.config.consumer_id,
                        t=topics, e=e)
            return
        if c.closed:
            return
        missing = {t for t in topics
                   if view.topic_errors.get(t) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        now = c.clock.seconds()
        if self.tracker.topics_checked(set(topics), missing, now):
            c.log.warn("{c}: subscribed topic(s) {t} do not exist "
                       "(UNKNOWN_TOPIC_OR_PARTITION): nothing of them can be assigned until "
                       "they are created; waiting up to default.api.timeout.ms={ms}",
                       c=c.config.consumer_id, t=", ".join(sorted(self.tracker.missing)),
                       ms=c.config.default_api_timeout_ms)
            self.tell()
        self._topics_changed()
        self.watch()

    def _topics_changed(self) -> None:
        had = self.problem is not None
        self._update_problem()
        if self.tracker.cleared and not had:
            self.tell()  # the warning is over (an error's end was told just now)

    def watch(self) -> None:
        """(Re)arm the one health timer at the next moment a problem may change state."""
        c = self._consumer
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        delay = self.tracker.next_check(c.clock.seconds())
        if delay is not None and not c.closed:
            self._timer = c.clock.callLater(delay, self._due)

    def _stop_watching(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _due(self) -> None:
        c = self._consumer
        self._timer = None
        if c.closed or c.state is State.FAILED:
            return
        now = c.clock.seconds()
        if self.tracker.missing:
            if self.tracker.reminder_due(now):
                c.log.warn("{c}: subscribed topic(s) {t} still do not exist "
                           "(UNKNOWN_TOPIC_OR_PARTITION)", c=c.config.consumer_id,
                           t=", ".join(sorted(self.tracker.missing)))
                self.tell()
            # Look again: a topic created since may not have reached this member yet.
            d = defer.Deferred.fromCoroutine(self._look_up_topics(sorted(self.tracker.missing)))
            d.addErrback(lambda f: c.log.failure("topic lookup failed", f))
        self._update_problem()
        self.watch()

    def _update_problem(self) -> None:
        """Make ``problem`` what the tracker says now, and tell the readers when it
        changes: every reader of all streams, and those of the missing topics' streams."""
        c = self._consumer
        now = c.clock.seconds()
        cfg = c.config
        problem: ConsumerError | None = None
        overdue = self.tracker.overdue_topics(now)
        if self.tracker.unreachable_overdue(now):
            problem = ConsumerUnavailable(
                cfg.group_id, [f"{h}:{p}" for h, p in c.cluster.bootstrap],
                self.tracker.reason, cfg.default_api_timeout_ms)
        elif overdue:
            problem = TopicNotFound(overdue, cfg.default_api_timeout_ms)
        if str(problem) == str(self.problem):
            return
        self.problem = problem
        if problem is not None:
            c.log.error("{c}: {e}", c=cfg.consumer_id, e=problem)
        # Readers run as their waits fail: every source holds its problem before any fails.
        sources: list[tuple[MessageSource, ConsumerError | None]] = [(c.messages, problem)]
        for (topic, _), stream in c.streams.items():
            if isinstance(problem, TopicNotFound) and topic is not None:
                sources.append((stream, problem if topic in problem.topics else None))
            else:
                sources.append((stream, problem))
        for source, p in sources:
            source.set_problem(p)
        for source, p in sources:
            source.report(p)
        self.tell()

    def tell(self) -> None:
        c = self._consumer
        if not self._listeners:
            return
        health = self.health()
        for cb in list(self._listeners):
            try:
                cb(health)
            except Exception:
                c.log.failure("problem listener failed")
