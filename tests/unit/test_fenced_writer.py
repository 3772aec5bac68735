"""The shared fenced writer (broker_core/fenced_writer.py) on the in-memory store: chunking,
the epoch check in every multi, and how each kind of failure is reported."""

from __future__ import annotations

from twisted.internet import defer

from broker_core import fenced_writer
from broker_core.fenced_writer import MULTI_BATCH, EpochMoved, write_fenced
from broker_core.metadata import (
    Check,
    ConnectionLost,
    Create,
    NodeExists,
    SetData,
    TransactionFailed,
)
from tests.support.memory_store import MemoryStore

EPOCH = "/epoch"


class RecordingStore(MemoryStore):
    """Records every multi it is given (test-only: ``sent``)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[list] = []

    def multi(self, ops):
        self.sent.append(list(ops))
        return super().multi(ops)


def store_at_epoch() -> RecordingStore:
    store = RecordingStore()
    store.create(EPOCH, b"1")
    store.sent.clear()
    return store


def outcome(coro) -> defer.Deferred:
    d = defer.Deferred.fromCoroutine(coro)
    assert d.called  # the memory store answers at once
    return d


def failure_of(d: defer.Deferred):
    errors: list = []
    d.addErrback(errors.append)
    assert len(errors) == 1
    return errors[0]


def test_every_chunk_is_led_by_the_epoch_check_and_holds_at_most_a_batch():
    store = store_at_epoch()
    ops = [Create(f"/n{i}", b"") for i in range(MULTI_BATCH * 2 + 1)]
    outcome(write_fenced(store, EPOCH, 0, ops))
    assert [len(m) for m in store.sent] == [MULTI_BATCH + 1, MULTI_BATCH + 1, 2]
    assert all(m[0] == Check(EPOCH, 0) for m in store.sent)
    assert [op for m in store.sent for op in m[1:]] == ops  # in order, each once
    assert all(f"/n{i}" in store.nodes for i in range(len(ops)))


def test_a_moved_epoch_is_reported_as_such_and_nothing_is_written():
    store = store_at_epoch()
    store.set(EPOCH, b"2")  # a newer holder bumped it
    f = failure_of(outcome(write_fenced(store, EPOCH, 0, [Create("/x", b"")])))
    assert f.check(EpochMoved) and isinstance(f.value.__cause__, TransactionFailed)
    assert "/x" not in store.nodes


def test_a_failed_operation_of_the_callers_is_raised_as_the_store_raised_it(monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)
    store = store_at_epoch()
    store.create("/taken", b"")
    store.sent.clear()
    ops = [Create("/a", b""), Create("/taken", b""), Create("/b", b"")]
    f = failure_of(outcome(write_fenced(store, EPOCH, 0, ops)))
    assert f.check(TransactionFailed) and isinstance(f.value.first_error, NodeExists)
    # The chunk before the failing one committed; none is sent after it.
    assert "/a" in store.nodes and "/b" not in store.nodes and len(store.sent) == 2


def test_a_store_that_took_nothing_is_raised_as_it_said():
    store = store_at_epoch()
    store.multi = lambda ops: defer.fail(ConnectionLost("no quorum leader"))
    f = failure_of(outcome(write_fenced(store, EPOCH, 0, [SetData(EPOCH, b"x")])))
    assert f.check(ConnectionLost)


def test_a_window_sends_several_chunks_before_the_first_answer(monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)
    held: list[defer.Deferred] = []
    store = store_at_epoch()
    real = store.multi

    def multi(ops):
        d: defer.Deferred = defer.Deferred()
        held.append((ops, d))
        return d

    store.multi = multi
    done = defer.Deferred.fromCoroutine(
        write_fenced(store, EPOCH, 0, [Create(f"/n{i}", b"") for i in range(5)], window=3))
    assert len(held) == 3 and not done.called
    for ops, d in list(held):
        real(ops).chainDeferred(d)
    assert len(held) == 5 and not done.called
    for ops, d in held[3:]:
        real(ops).chainDeferred(d)
    assert done.called and all(f"/n{i}" in store.nodes for i in range(5))


def test_a_window_below_one_is_refused():
    f = failure_of(outcome(write_fenced(store_at_epoch(), EPOCH, 0, [], window=0)))
    assert f.check(ValueError)
