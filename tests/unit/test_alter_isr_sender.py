"""``AlterIsrSender`` on a ``task.Clock`` with a scripted controller connection: batching,
answers, retries of requests whose fate is unknown, and superseded changes."""

from __future__ import annotations

from twisted.internet import defer, task

from broker_core.replica.alter_isr import AlterIsrSender, IsrChange
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.fake_controller import FakeController


def make(clock, ctrl, results, controller=(3, "127.0.0.1", 9092)):
    return AlterIsrSender(
        1, lambda: 77, lambda: controller,
        lambda change, error, epoch, isr, version: results.append(
            (change.topic, change.partition, error, isr, version)),
        reactor=None, clock=clock, backoff_s=0.5, connect=ctrl.connect)


def change(p: int, isr=(1, 2), version=4) -> IsrChange:
    return IsrChange("t", p, 3, tuple(isr), version)


def test_changes_of_one_turn_travel_in_one_request():
    clock, ctrl, results = task.Clock(), FakeController(), []
    sender = make(clock, ctrl, results)
    sender.submit(change(0))
    sender.submit(change(1, isr=(1, 3)))
    assert ctrl.requests == []  # not before the reactor turn ends
    clock.advance(0)
    assert len(ctrl.requests) == 1
    api, version, body, _ = ctrl.requests[0]
    assert api == ApiKey.ALTER_PARTITION and version == 1
    assert body["broker_id"] == 1 and body["broker_epoch"] == 77
    parts = body["topics"][0]["partitions"]
    assert [(p["partition_index"], p["new_isr"], p["partition_epoch"]) for p in parts] == [
        (0, [1, 2], 4), (1, [1, 3], 4)]
    ctrl.answer(0, errors={("t", 1): int(ErrorCode.INVALID_UPDATE_VERSION)})
    assert results == [("t", 0, None, (1, 2), 5), ("t", 1, "INVALID_UPDATE_VERSION", (1, 3), 5)]
    assert sender.pending == 0


def test_unknown_fate_is_sent_again_after_the_backoff():
    clock, ctrl, results = task.Clock(), FakeController(), []
    ctrl.refuse_connections = 1
    sender = make(clock, ctrl, results)
    sender.submit(change(0))
    clock.advance(0)
    assert ctrl.requests == [] and sender.pending == 1
    clock.advance(0.4)
    assert ctrl.connects == 1
    clock.advance(0.2)  # past the 0.5 s backoff
    assert len(ctrl.requests) == 1
    # The controller moved: NOT_CONTROLLER means "not applied", so it goes again.
    ctrl.answer(0, top_error=int(ErrorCode.NOT_CONTROLLER))
    assert results == []
    clock.advance(0.5)
    assert len(ctrl.requests) == 2
    ctrl.answer(1)
    assert results == [("t", 0, None, (1, 2), 5)]


def test_one_request_in_flight_and_the_newest_change_wins():
    clock, ctrl, results = task.Clock(), FakeController(), []
    sender = make(clock, ctrl, results)
    sender.submit(change(0, isr=(1, 2, 3)))
    clock.advance(0)
    sender.submit(change(0, isr=(1, 2), version=5))  # while the first is in flight
    clock.advance(1)
    assert len(ctrl.requests) == 1
    ctrl.answer(0, top_error=int(ErrorCode.NOT_CONTROLLER))
    clock.advance(1)
    assert len(ctrl.requests) == 2
    parts = ctrl.requests[1][2]["topics"][0]["partitions"]
    assert [(p["new_isr"], p["partition_epoch"]) for p in parts] == [([1, 2], 5)]


def test_a_superseded_change_is_not_sent():
    clock, ctrl, results = task.Clock(), FakeController(), []
    sender = make(clock, ctrl, results)
    sender.submit(change(0))
    sender.forget(("t", 0))
    clock.advance(1)
    assert ctrl.requests == [] and sender.pending == 0


def test_without_a_known_controller_it_waits():
    clock, ctrl, results = task.Clock(), FakeController(), []
    sender = make(clock, ctrl, results, controller=None)
    sender.submit(change(0))
    clock.advance(0)
    clock.advance(5)
    assert ctrl.connects == 0 and sender.pending == 1
    sender.stop()
    clock.advance(5)
    assert sender.pending == 0


def test_a_request_stuck_on_a_deposed_controller_goes_to_the_new_one():
    # The controller was cut off: the connection to it neither opens nor fails (packets are
    # dropped). When another broker becomes controller the attempt is abandoned at once rather
    # than after the connect and request timeouts, and the change goes to the new controller.
    clock, results = task.Clock(), []
    target = [(3, "10.0.0.3", 9092)]
    connects: list[tuple[str, defer.Deferred]] = []
    fresh = FakeController()

    def connect(host: str, port: int) -> defer.Deferred:
        if host == "10.0.0.3":
            d: defer.Deferred = defer.Deferred()  # hangs
            connects.append((host, d))
            return d
        connects.append((host, defer.succeed(fresh)))
        return connects[-1][1]

    sender = AlterIsrSender(
        1, lambda: 77, lambda: target[0],
        lambda change, error, epoch, isr, version: results.append((change.partition, error)),
        reactor=None, clock=clock, backoff_s=0.1, timeout_s=30.0, connect=connect,
        follow_s=0.5)
    sender.submit(change(0))
    clock.advance(0)
    assert [h for h, _ in connects] == ["10.0.0.3"]
    clock.advance(2.0)
    assert len(connects) == 1 and sender.pending == 1  # still waiting on the old controller
    target[0] = (2, "10.0.0.2", 9092)
    clock.advance(0.5)  # noticed within follow_s
    assert connects[0][1].called  # the hanging attempt was cancelled
    clock.advance(0.1)  # the back-off
    assert [h for h, _ in connects] == ["10.0.0.3", "10.0.0.2"]
    assert len(fresh.requests) == 1
    fresh.answer(0)
    assert results == [(0, None)] and sender.pending == 0
