"""A stopping broker's controlled shutdown gives up once its metadata session is suspended
(``BrokerService._controlled_shutdown``), on a real one-voter quorum
(``tests/support/local_quorum.py``) and a ``task.Clock``.

The case: the last brokers of a quorum cluster stopped one after another. The controller's
decisions are metadata writes, and a controller paused because its session is suspended holds
a ControlledShutdown until ``controller.socket.timeout.ms`` (30 s) ran out, so a supervisor's
SIGKILL came first. The controller here is the broker's local one as the broker sees it
(``active``, answering ControlledShutdown): one that never answers is what a paused one does.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from twisted.internet import defer, task

from broker_core.broker import BrokerService
from broker_core.metadata import SessionState
from broker_core.raft.metadata_store import QuorumMetadataStore
from tests.support.local_quorum import FAST, LocalQuorum, run


class PausedController:
    """The local active controller whose event queue waits for its session to come back."""

    active = True

    def __init__(self) -> None:
        self.asked: list[defer.Deferred] = []

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.asked.append(d)
        return d


class AnsweringController(PausedController):
    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> defer.Deferred:
        return defer.succeed((None, []))


def stopping_broker(clock, store, controller) -> SimpleNamespace:
    return SimpleNamespace(
        broker_id=3, registration_epoch=7, store=store, controller=controller, reactor=clock,
        config=SimpleNamespace(controlled_shutdown_max_retries=3,
                               controlled_shutdown_retry_backoff_ms=5000,
                               controller_socket_timeout_ms=30000),
        cluster_credential=SimpleNamespace(login=None), peer_tls=None, log=BrokerService.log)


def started_store(clock) -> tuple[LocalQuorum, QuorumMetadataStore]:
    quorum = LocalQuorum(clock, config=replace(FAST, election_timeout_ms=1500))
    store = QuorumMetadataStore(quorum, reactor=clock, session_timeout=6.0)
    run(clock, store.start())
    return quorum, store


def test_a_controlled_shutdown_is_abandoned_when_the_session_is_suspended():
    clock = task.Clock()
    quorum, store = started_store(clock)
    states: list[SessionState] = []
    store.add_state_listener(states.append)
    controller = PausedController()
    broker = stopping_broker(clock, store, controller)
    d = defer.Deferred.fromCoroutine(BrokerService._controlled_shutdown(broker))
    assert controller.asked and not d.called  # asked, and the controller holds it
    start = clock.seconds()
    quorum.resign()  # no leader: the next heartbeat fails and the session is suspended
    while SessionState.SUSPENDED not in states:
        assert not d.called
        clock.advance(0.1)
    assert d.called  # at the suspension, not at the 30 s request timeout
    assert clock.seconds() - start < 30.0
    assert controller.asked[0].called  # the attempt was cancelled, not left waiting
    run(clock, store.stop())
    quorum.stop()
    for call in clock.getDelayedCalls():  # the cancelled attempt's backoff, then it returns
        call.cancel()


def test_a_controlled_shutdown_answered_in_time_is_not_abandoned():
    clock = task.Clock()
    quorum, store = started_store(clock)
    broker = stopping_broker(clock, store, AnsweringController())
    before = list(store._listeners._callbacks)
    run(clock, BrokerService._controlled_shutdown(broker))
    assert store._listeners._callbacks == before  # its state listener went with it
    run(clock, store.stop())
    quorum.stop()
