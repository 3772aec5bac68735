"""The consumer's group membership as an explicit, pure state machine (docs/design.md).

No I/O and no clock: :meth:`Membership.handle` takes an :class:`Input` and returns the
:class:`Action` s the Twisted shell (:mod:`consumer_client.consumer`) must carry out, in order.
The whole behaviour is the table :data:`TRANSITIONS`; a pair that is not in it is a bug in the
caller and raises :class:`IllegalTransition` (inputs that can legitimately arrive late, such as a
silence timer in a state without a channel, are listed explicitly as no-ops).

States:

``DISCOVERING``
    Asking any broker for the coordinator (ClusterMetadata), with backoff between attempts.
``REGISTERING``
    Connected to the coordinator, RegisterConsumer sent.
``WAITING``
    Registered; the channel is served; no partitions yet (waiting for StartFetcher).
``FETCHING``
    StartFetcher received: fetchers run from the given offsets.
``STOPPED``
    StopFetcher received: fetchers stopped, queues cleared, offsets reported.
``DEPARTING``
    ``close()`` asked: fetchers stopped, the partitions revoked, UnregisterConsumer (the leave,
    with the final offsets when auto-commit is on) sent on an ordinary connection; waiting for
    its answer (bounded). Requests on the channel are still answered, with the final offsets.
``CLOSING``
    The leave was refused or not answered in time (the slow path): the next Ping is answered
    with the final offsets.
``LEAVING``
    Final offsets sent; waiting for one more Ping (proof the answer arrived) or a timeout.
``CLOSED``
    Done: channel closed, fetchers stopped. Terminal.
``FAILED``
    The coordinator refused the registration for a reason retrying cannot fix (duplicate
    consumer id, session timeout out of range, bad topic count), or a broker refused the
    consumer's login or TLS handshake. Only ``CLOSE`` leaves it.

Invariant: fetchers run only in ``FETCHING``; a channel is open only in ``REGISTERING`` ..
``LEAVING``; the leave is sent only after the fetchers stopped (the positions it carries are
final) and the partitions were revoked; every path to ``DISCOVERING`` from a registered state
stops fetchers first (docs/coordinator.md, "Failover": a consumer that lost its coordinator
must not keep consuming partitions that the group may already have handed to someone else).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class State(Enum):
    DISCOVERING = "discovering"
    REGISTERING = "registering"
    WAITING = "waiting_for_assignment"
    FETCHING = "fetching"
    STOPPED = "stopped"
    DEPARTING = "departing"
    CLOSING = "closing"
    LEAVING = "leaving"
    CLOSED = "closed"
    FAILED = "failed"


class Input(Enum):
    COORDINATOR_FOUND = "coordinator_found"
    DISCOVERY_FAILED = "discovery_failed"
    REGISTERED = "registered"
    REFUSED = "refused"  # retriable: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...
    REJECTED = "rejected"  # fatal: DUPLICATE_CONSUMER_ID, ..., a refused login
    PING = "ping"
    STOP_FETCHER = "stop_fetcher"
    START_FETCHER = "start_fetcher"
    SILENCE = "silence"  # no request from the coordinator for a session timeout
    CHANNEL_LOST = "channel_lost"
    FETCH_FAILED = "fetch_failed"  # fetchers stopped unexpectedly (docs/design.md)
    CLOSE = "close"
    CLOSE_TIMEOUT = "close_timeout"
    LEFT = "left"  # the coordinator accepted the leave: the member is out of the group
    LEAVE_FAILED = "leave_failed"  # the leave was refused, failed, or not answered in time


class Action(Enum):
    DISCOVER = "discover"  # look for the coordinator (after a backoff when retrying)
    REGISTER = "register"  # connect to it and send RegisterConsumer
    SERVE = "serve"  # turn the connection into a coordinator channel, arm the silence timer
    STOP_FETCHERS = "stop_fetchers"  # stop fetching and drop queued, undelivered chunks
    REVOKE = "revoke"  # tell the assignment listener the partitions are going
    RELEASE = "release"  # forget the assignment: positions stop moving, nothing is reported
    START_FETCHERS = "start_fetchers"  # fetch the assignment of the StartFetcher request
    REPORT_OFFSETS = "report_offsets"  # answer with the consumed offsets (when auto-commit)
    ANSWER = "answer"  # answer without offsets (StartFetcher; Ping without auto-commit)
    CLOSE_CHANNEL = "close_channel"
    ARM_CLOSE_TIMER = "arm_close_timer"
    SEND_LEAVE = "send_leave"  # UnregisterConsumer with the final offsets, answer bounded
    FAIL = "fail"  # surface the fatal registration error to the application
    FINISH = "finish"  # fire the closed Deferred; release everything


S, I, A = State, Input, Action  # noqa: E741 (a table reads better with short names)
_REGISTERED = (S.WAITING, S.FETCHING, S.STOPPED)
_LOSE = (A.STOP_FETCHERS, A.REVOKE, A.RELEASE, A.CLOSE_CHANNEL, A.DISCOVER)
_STOP = (A.STOP_FETCHERS, A.REVOKE, A.REPORT_OFFSETS, A.RELEASE)

#: (state, input) -> (next state, actions). ``REPORT_OFFSETS`` means "with offsets when
#: auto-commit is on, ``offsets: null`` otherwise", which the shell decides from its config.
TRANSITIONS: dict[tuple[State, Input], tuple[State, tuple[Action, ...]]] = {
    (S.DISCOVERING, I.COORDINATOR_FOUND): (S.REGISTERING, (A.REGISTER,)),
    (S.DISCOVERING, I.DISCOVERY_FAILED): (S.DISCOVERING, (A.DISCOVER,)),
    (S.DISCOVERING, I.SILENCE): (S.DISCOVERING, ()),
    (S.DISCOVERING, I.CHANNEL_LOST): (S.DISCOVERING, ()),
    (S.DISCOVERING, I.FETCH_FAILED): (S.DISCOVERING, ()),
    (S.DISCOVERING, I.CLOSE): (S.CLOSED, (A.FINISH,)),
    # A broker refused the login (or the TLS handshake) while discovering: no channel yet.
    (S.DISCOVERING, I.REJECTED): (S.FAILED, (A.FAIL,)),

    (S.REGISTERING, I.REGISTERED): (S.WAITING, (A.SERVE,)),
    (S.REGISTERING, I.REFUSED): (S.DISCOVERING, (A.CLOSE_CHANNEL, A.DISCOVER)),
    (S.REGISTERING, I.CHANNEL_LOST): (S.DISCOVERING, (A.CLOSE_CHANNEL, A.DISCOVER)),
    (S.REGISTERING, I.REJECTED): (S.FAILED, (A.CLOSE_CHANNEL, A.FAIL)),
    (S.REGISTERING, I.SILENCE): (S.REGISTERING, ()),
    (S.REGISTERING, I.FETCH_FAILED): (S.REGISTERING, ()),
    (S.REGISTERING, I.CLOSE): (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH)),

    (S.WAITING, I.PING): (S.WAITING, (A.REPORT_OFFSETS,)),
    (S.WAITING, I.STOP_FETCHER): (S.STOPPED, (A.REPORT_OFFSETS,)),
    (S.WAITING, I.START_FETCHER): (S.FETCHING, (A.START_FETCHERS, A.ANSWER)),
    (S.WAITING, I.FETCH_FAILED): (S.WAITING, ()),
    # Nothing consumed yet: leave with nothing to hand over (see DEPARTING's fallback).
    (S.WAITING, I.CLOSE): (S.DEPARTING, (A.SEND_LEAVE,)),

    (S.FETCHING, I.PING): (S.FETCHING, (A.REPORT_OFFSETS,)),
    (S.FETCHING, I.STOP_FETCHER): (S.STOPPED, _STOP),
    # A StartFetcher without a StopFetcher first (a coordinator that skipped it, or a repeat):
    # the new assignment replaces the old one.
    (S.FETCHING, I.START_FETCHER): (S.FETCHING, (A.STOP_FETCHERS, A.REVOKE, A.RELEASE,
                                                 A.START_FETCHERS, A.ANSWER)),
    (S.FETCHING, I.FETCH_FAILED): (S.DISCOVERING, _LOSE),

    (S.STOPPED, I.PING): (S.STOPPED, (A.REPORT_OFFSETS,)),
    (S.STOPPED, I.STOP_FETCHER): (S.STOPPED, (A.REPORT_OFFSETS,)),
    (S.STOPPED, I.START_FETCHER): (S.FETCHING, (A.START_FETCHERS, A.ANSWER)),
    (S.STOPPED, I.FETCH_FAILED): (S.STOPPED, ()),

    # Shutdown: the leave is on its way. Fetchers are stopped, so the positions are final and
    # every answer on the channel carries them; a StartFetcher is acknowledged, not started.
    (S.DEPARTING, I.PING): (S.DEPARTING, (A.REPORT_OFFSETS,)),
    (S.DEPARTING, I.STOP_FETCHER): (S.DEPARTING, (A.REPORT_OFFSETS,)),
    (S.DEPARTING, I.START_FETCHER): (S.DEPARTING, (A.ANSWER,)),
    (S.DEPARTING, I.FETCH_FAILED): (S.DEPARTING, ()),
    (S.DEPARTING, I.CLOSE): (S.DEPARTING, ()),
    (S.DEPARTING, I.CLOSE_TIMEOUT): (S.DEPARTING, ()),
    # The coordinator wrote the final offsets and removed the member: nothing is left to do.
    (S.DEPARTING, I.LEFT): (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH)),
    # No answer in time, or a refusal: hand the offsets over the slow way, on the channel
    # (without auto-commit there is nothing to hand over: see CLOSE_WITHOUT_COMMIT).
    (S.DEPARTING, I.LEAVE_FAILED): (S.CLOSING, ()),

    # The slow path (docs/coordinator.md, "Leaving"): stop consuming now, answer the next Ping
    # with the final offsets, then wait for the Ping after it.
    # (The partitions were revoked when the close began.)
    (S.CLOSING, I.PING): (S.LEAVING, (A.REPORT_OFFSETS, A.ARM_CLOSE_TIMER)),
    (S.CLOSING, I.STOP_FETCHER): (S.LEAVING, (A.REPORT_OFFSETS, A.ARM_CLOSE_TIMER)),
    # Leaving anyway: acknowledge, but do not start; our disconnect makes the group rebalance.
    (S.CLOSING, I.START_FETCHER): (S.CLOSING, (A.ANSWER,)),
    (S.CLOSING, I.FETCH_FAILED): (S.CLOSING, ()),
    (S.CLOSING, I.CLOSE): (S.CLOSING, ()),
    (S.LEAVING, I.PING): (S.CLOSED, (A.REPORT_OFFSETS, A.CLOSE_CHANNEL, A.FINISH)),
    (S.LEAVING, I.STOP_FETCHER): (S.CLOSED, (A.REPORT_OFFSETS, A.CLOSE_CHANNEL, A.FINISH)),
    (S.LEAVING, I.START_FETCHER): (S.CLOSED, (A.ANSWER, A.CLOSE_CHANNEL, A.FINISH)),
    (S.LEAVING, I.FETCH_FAILED): (S.LEAVING, ()),
    (S.LEAVING, I.CLOSE): (S.LEAVING, ()),

    (S.FAILED, I.CLOSE): (S.CLOSED, (A.FINISH,)),
}

for _s in _REGISTERED:
    # No request for a session timeout means the coordinator is gone.
    TRANSITIONS[(_s, I.SILENCE)] = (S.DISCOVERING, _LOSE)
    TRANSITIONS[(_s, I.CHANNEL_LOST)] = (S.DISCOVERING, _LOSE)
for _s in (S.FETCHING, S.STOPPED):
    # The rule: stop fetching and settle the positions before anything is handed over;
    # the listener hears of the revocation before the coordinator can give the partitions away.
    TRANSITIONS[(_s, I.CLOSE)] = (S.DEPARTING, (A.STOP_FETCHERS, A.REVOKE, A.SEND_LEAVE))
for _s in (S.DEPARTING, S.CLOSING, S.LEAVING):
    # The coordinator is gone (or removed us after the leave, closing the channel before its
    # answer arrived): nothing more can be handed over.
    TRANSITIONS[(_s, I.SILENCE)] = (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH))
    TRANSITIONS[(_s, I.CHANNEL_LOST)] = (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH))
for _s in (S.CLOSING, S.LEAVING):
    TRANSITIONS[(_s, I.CLOSE_TIMEOUT)] = (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH))
    # A late answer to the leave: the slow path already runs, and finishes on its own.
    TRANSITIONS[(_s, I.LEFT)] = (_s, ())
    TRANSITIONS[(_s, I.LEAVE_FAILED)] = (_s, ())
for _i in Input:
    # Late inputs (a timer or a lost connection racing the end) change nothing once closed.
    TRANSITIONS[(S.CLOSED, _i)] = (S.CLOSED, ())
    TRANSITIONS.setdefault((S.FAILED, _i), (S.FAILED, ()))

#: Without auto-commit there is nothing to hand over at close (docs/coordinator.md): the leave
#: still goes (so the group rebalances at once and the coordinator counts a leave, not a
#: failure), but when it is not answered the member just closes: these pairs replace
#: :data:`TRANSITIONS`' for such a member.
CLOSE_WITHOUT_COMMIT: dict[tuple[State, Input], tuple[State, tuple[Action, ...]]] = {
    (S.DEPARTING, I.LEAVE_FAILED): (S.CLOSED, (A.CLOSE_CHANNEL, A.FINISH)),
}


class IllegalTransition(Exception):
    def __init__(self, state: State, event: Input) -> None:
        super().__init__(f"input {event.value} is not expected in state {state.value}")
        self.state = state
        self.event = event


@dataclass
class Membership:
    """The membership of one consumer. ``generation`` is the last StartFetcher's generation id
    (-1 before the first); ``history`` keeps the last transitions for debugging."""

    auto_commit: bool = True
    state: State = State.DISCOVERING
    generation: int = -1
    rebalances: int = 0
    history: list[tuple[State, Input, State]] = field(default_factory=list)

    def handle(self, event: Input) -> tuple[Action, ...]:
        """Apply ``event``; returns the actions to carry out, in order."""
        key = (self.state, event)
        if not self.auto_commit and key in CLOSE_WITHOUT_COMMIT:
            target, actions = CLOSE_WITHOUT_COMMIT[key]
        else:
            try:
                target, actions = TRANSITIONS[key]
            except KeyError:
                raise IllegalTransition(self.state, event) from None
        if event is Input.START_FETCHER and target is State.FETCHING:
            self.rebalances += 1
        if target is not self.state:
            self.history.append((self.state, event, target))
            del self.history[:-32]
        self.state = target
        return actions

    @property
    def registered(self) -> bool:
        """A channel to the coordinator is served."""
        return self.state in (State.WAITING, State.FETCHING, State.STOPPED, State.DEPARTING,
                              State.CLOSING, State.LEAVING)

    @property
    def done(self) -> bool:
        return self.state is State.CLOSED
