"""The delayed-operation purgatory on ``task.Clock``: triggers, expiry, exactly-once completion,
several watch keys, lazy purge, re-entrancy, failing callbacks, shutdown and metrics; a fetch
that parks right after its own check."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet import task
from twisted.logger import capturedLogs

from broker_core.metrics import BrokerMetrics
from broker_core.purgatory import DelayedOperation, Purgatory, PurgatoryClosedError
from broker_core.replica.delayed import DelayedFetch


class Waiter(DelayedOperation):
    """Completes once ``state[key] >= target``; records how it ended in ``events``."""

    def __init__(self, name: str, timeout_s: float, state: dict, key: object, target: int,
                 events: list) -> None:
        super().__init__(timeout_s)
        self.name = name
        self.state = state
        self.key = key
        self.target = target
        self.events = events
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if self.state.get(self.key, 0) >= self.target:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.events.append(("complete", self.name))

    def on_expiration(self) -> None:
        self.events.append(("expire", self.name))


def make_purgatory(purge_interval: int = 1000, metrics: BrokerMetrics | None = None):
    """Returns ``(clock, purgatory, state, events)``: a Clock, a purgatory named "test" on it,
    the condition state the Waiters read, and the list they report to."""
    clock = task.Clock()
    return clock, Purgatory("test", clock, metrics=metrics, purge_interval=purge_interval), {}, []


def test_completes_at_once_when_the_condition_already_holds():
    clock, purgatory, state, events = make_purgatory()
    state["k"] = 5
    op = Waiter("a", 1.0, state, "k", 1, events)
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert events == [("complete", "a")]
    assert purgatory.watched("k") == 0 and purgatory.delayed == 0
    assert clock.getDelayedCalls() == []


def test_completes_on_trigger():
    clock, purgatory, state, events = make_purgatory()
    op = Waiter("a", 1.0, state, "k", 1, events)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert purgatory.watched("k") == 1 and purgatory.delayed == 1
    assert purgatory.check_and_complete("k") == 0  # condition still false
    state["k"] = 1
    assert purgatory.check_and_complete("k") == 1
    assert events == [("complete", "a")]
    assert op.completed and purgatory.delayed == 0 and purgatory.watched("k") == 0
    clock.advance(5)
    assert events == [("complete", "a")]  # the timeout was cancelled


def test_trigger_on_an_unwatched_key_does_nothing():
    _, purgatory, state, events = make_purgatory()
    purgatory.try_complete_else_watch(Waiter("a", 1.0, state, "k", 1, events), ["k"])
    state["k"] = 1
    assert purgatory.check_and_complete("other") == 0
    assert events == []


def test_expires_at_its_timeout_not_before():
    clock, purgatory, state, events = make_purgatory()
    op = Waiter("a", 0.5, state, "k", 1, events)
    purgatory.try_complete_else_watch(op, ["k"])
    clock.advance(0.499)
    assert events == []
    clock.advance(0.001)
    # on_complete answers first, then on_expiration.
    assert events == [("complete", "a"), ("expire", "a")]
    assert op.completed and purgatory.delayed == 0


def test_zero_timeout_expires_immediately():
    clock, purgatory, state, events = make_purgatory()
    op = Waiter("a", 0, state, "k", 1, events)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert events == [("complete", "a"), ("expire", "a")]
    assert purgatory.delayed == 0 and clock.getDelayedCalls() == []


def test_negative_timeout_from_a_client_means_do_not_wait():
    op = Waiter("a", -1, {}, "k", 1, [])
    assert op.timeout_s == 0.0
    with pytest.raises(ValueError, match="NaN"):
        Waiter("b", float("nan"), {}, "k", 1, [])


def test_exactly_once_when_trigger_and_expiry_race():
    clock, purgatory, state, events = make_purgatory()
    op = Waiter("a", 0.1, state, "k", 1, events)
    purgatory.try_complete_else_watch(op, ["k"])
    # The condition becomes true at the same instant the timeout falls due; whichever runs
    # first wins and the other finds the operation completed.
    state["k"] = 1
    clock.advance(0.1)
    assert purgatory.check_and_complete("k") == 0
    assert op.force_complete() is False
    assert events == [("complete", "a"), ("expire", "a")]

    op2 = Waiter("b", 0.1, state, "j", 1, events)
    purgatory.try_complete_else_watch(op2, ["j"])
    state["j"] = 1
    assert purgatory.check_and_complete("j") == 1  # trigger first...
    clock.advance(0.1)  # ...then the (cancelled) timeout
    assert events[2:] == [("complete", "b")]


def test_force_complete_returns_true_only_for_the_first_caller():
    events: list = []
    op = Waiter("a", 1, {}, "k", 1, events)
    assert op.force_complete() is True
    assert op.force_complete() is False
    op.run()  # a late expiry
    assert events == [("complete", "a")]


def test_watch_under_several_keys_completes_once():
    clock, purgatory, state, events = make_purgatory()

    class Any2(Waiter):
        def try_complete(self) -> bool:
            if state.get("x", 0) + state.get("y", 0) >= 2:
                return self.force_complete()
            return False

    op = Any2("a", 1.0, state, None, 0, events)
    assert purgatory.try_complete_else_watch(op, ["x", "y", "x"]) is False  # duplicate key
    assert purgatory.watched("x") == 1 and purgatory.watched("y") == 1
    assert purgatory.size == 2
    state["x"] = 1
    assert purgatory.check_and_complete("x") == 0
    state["y"] = 1
    assert purgatory.check_and_complete("y") == 1
    assert purgatory.check_and_complete("x") == 0
    assert events == [("complete", "a")]
    # Both lists were walked after completion, so both entries are gone.
    assert purgatory.size == 0


def test_completed_entries_stay_on_other_keys_until_purged():
    clock, purgatory, state, events = make_purgatory(purge_interval=3)
    ops = [Waiter(f"op{i}", 10.0, state, "a", 1, events) for i in range(4)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", f"other{op.name}"])
    assert purgatory.size == 8
    state["a"] = 1
    assert purgatory.check_and_complete("a") == 4
    # "a"'s list was swept; each op's second key still holds a stale entry.
    assert purgatory.size == 4
    assert purgatory.watched("otherop0") == 0  # stale entries are not counted as watched
    # Stale entries (4) exceed purge_interval (3): the next watch purges them.
    purgatory.try_complete_else_watch(Waiter("new", 10.0, state, "b", 1, events), ["b"])
    assert purgatory.size == 1


def test_purge_is_lazy_below_the_interval():
    clock, purgatory, state, events = make_purgatory(purge_interval=10)
    for i in range(3):
        op = Waiter(f"op{i}", 10.0, state, "a", 1, events)
        purgatory.try_complete_else_watch(op, ["a", f"k{i}"])
        op.force_complete()  # completed from outside: no walk of its lists
    purgatory.try_complete_else_watch(Waiter("n", 10.0, state, "b", 1, events), ["b"])
    assert purgatory.size == 7  # 6 stale entries, not yet worth a sweep
    assert purgatory.purge() == 6
    assert purgatory.size == 1


def test_cancel_retires_without_completing():
    clock, purgatory, state, events = make_purgatory()
    op = Waiter("a", 1.0, state, "k", 1, events)
    purgatory.try_complete_else_watch(op, ["k"])
    assert op.cancel() is True
    assert op.cancelled and op.completed and purgatory.delayed == 0
    state["k"] = 1
    assert purgatory.check_and_complete("k") == 0
    clock.advance(5)
    assert events == []
    assert op.force_complete() is False and op.cancel() is False


def test_completion_from_within_on_complete_is_safe():
    """An op whose on_complete triggers the key it is watched under (and completes others)."""
    clock, purgatory, state, events = make_purgatory()

    class Chain(Waiter):
        def on_complete(self) -> None:
            super().on_complete()
            state["k"] = state.get("k", 0) + 1
            purgatory.check_and_complete("k")  # re-enters while "k" is being walked

    ops = [Chain(f"c{i}", 10.0, state, "k", i + 1, events) for i in range(5)]
    for op in ops:
        assert purgatory.try_complete_else_watch(op, ["k"]) is False
    state["k"] = 1
    purgatory.check_and_complete("k")
    assert [name for kind, name in events] == ["c0", "c1", "c2", "c3", "c4"]
    assert all(kind == "complete" for kind, _ in events)
    assert purgatory.watched("k") == 0 and purgatory.delayed == 0 and purgatory.size == 0


def test_on_complete_may_watch_a_new_operation_under_the_same_key():
    clock, purgatory, state, events = make_purgatory()
    follow_up = Waiter("next", 1.0, state, "k", 2, events)

    class Spawner(Waiter):
        def on_complete(self) -> None:
            super().on_complete()
            purgatory.try_complete_else_watch(follow_up, ["k"])

    purgatory.try_complete_else_watch(Spawner("first", 1.0, state, "k", 1, events), ["k"])
    state["k"] = 1
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched("k") == 1  # the follow-up survived the sweep of "k"
    state["k"] = 2
    assert purgatory.check_and_complete("k") == 1
    assert events == [("complete", "first"), ("complete", "next")]


def test_expiry_may_complete_another_operation():
    clock, purgatory, state, events = make_purgatory()
    other = Waiter("other", 10.0, state, "k", 99, events)

    class Killer(Waiter):
        def on_expiration(self) -> None:
            super().on_expiration()
            other.force_complete()

    purgatory.try_complete_else_watch(Killer("killer", 0.2, state, "k", 99, events), ["k"])
    purgatory.try_complete_else_watch(other, ["k"])
    clock.advance(0.2)
    assert events == [("complete", "killer"), ("expire", "killer"), ("complete", "other")]
    assert purgatory.delayed == 0
    clock.advance(20)
    assert len(events) == 3


def test_operation_completed_during_its_own_watch_is_reported_complete():
    clock, purgatory, state, events = make_purgatory()

    class SelfTriggering(Waiter):
        def try_complete(self) -> bool:
            # The second try sees the state its first try changed: no trigger is missed.
            self.tries += 1
            if self.tries == 1:
                state["k"] = 1
                return False
            return super().try_complete()

    op = SelfTriggering("a", 1.0, state, "k", 1, events)
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert events == [("complete", "a")] and purgatory.delayed == 0


def test_exception_in_try_complete_is_logged_and_completes_the_operation():
    clock, purgatory, state, events = make_purgatory()

    class Broken(Waiter):
        def try_complete(self) -> bool:
            if state.get("boom"):
                raise RuntimeError("bad condition")
            return super().try_complete()

    bad = Broken("bad", 10.0, state, "k", 5, events)
    good = Waiter("good", 10.0, state, "k", 1, events)
    purgatory.try_complete_else_watch(bad, ["k"])
    purgatory.try_complete_else_watch(good, ["k"])
    state["boom"] = True
    state["k"] = 1
    with capturedLogs() as logged:
        assert purgatory.check_and_complete("k") == 2
    assert ("complete", "bad") in events and ("complete", "good") in events
    assert any("try_complete" in e.get("log_format", "") for e in logged)
    assert purgatory.delayed == 0


def test_exceptions_in_on_complete_and_on_expiration_are_logged_and_contained():
    clock, purgatory, state, events = make_purgatory()

    class Noisy(Waiter):
        def on_complete(self) -> None:
            super().on_complete()
            raise RuntimeError("cannot answer")

        def on_expiration(self) -> None:
            super().on_expiration()
            raise RuntimeError("cannot count")

    a = Noisy("a", 10.0, state, "k", 1, events)
    b = Noisy("b", 0.1, state, "j", 1, events)
    purgatory.try_complete_else_watch(a, ["k"])
    purgatory.try_complete_else_watch(b, ["j"])
    with capturedLogs() as logged:
        state["k"] = 1
        assert purgatory.check_and_complete("k") == 1
        clock.advance(0.1)
    assert events == [("complete", "a"), ("complete", "b"), ("expire", "b")]
    failures = [e for e in logged if e.get("log_failure") is not None]
    assert len(failures) == 3
    assert purgatory.delayed == 0 and purgatory.watched("k") == 0


def test_operations_need_a_key_and_one_purgatory():
    _, purgatory, state, events = make_purgatory()
    op = Waiter("a", 1.0, state, "k", 1, events)
    with pytest.raises(ValueError, match="at least one watch key"):
        purgatory.try_complete_else_watch(op, [])
    purgatory.try_complete_else_watch(op, ["k"])
    other = Purgatory("other", task.Clock())
    with pytest.raises(ValueError, match="already watched"):
        other.try_complete_else_watch(op, ["k"])


def test_shutdown_cancels_the_timer_without_completing_and_reports_waiting_ops():
    clock, purgatory, state, events = make_purgatory()
    ops = [Waiter(f"op{i}", 1.0 + i, state, "k", 1, events) for i in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    with capturedLogs() as logged:
        waiting = purgatory.shutdown()
    assert waiting == ops
    assert any(e.get("n") == 3 for e in logged)
    assert clock.getDelayedCalls() == []
    clock.advance(10)
    state["k"] = 1
    assert purgatory.check_and_complete("k") == 0
    assert events == [] and not any(op.completed for op in ops)
    assert purgatory.delayed == 0 and purgatory.size == 0
    # The owner may still answer them itself.
    assert ops[0].force_complete() is True
    with pytest.raises(PurgatoryClosedError, match="test"):
        purgatory.try_complete_else_watch(Waiter("late", 1.0, state, "k", 9, events), ["k"])


def test_gauges_follow_the_purgatory():
    registry = CollectorRegistry()
    clock, purgatory, state, events = make_purgatory(metrics=BrokerMetrics(registry))

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(name, {"purgatory": "test"})

    for i in range(3):
        purgatory.try_complete_else_watch(Waiter(f"{i}", 1.0, state, "k", i + 1, events),
                                          ["k", f"own{i}"])
    assert gauge("sluice_purgatory_delayed_operations") == 3
    assert gauge("sluice_purgatory_size") == 6
    state["k"] = 1
    purgatory.check_and_complete("k")
    assert gauge("sluice_purgatory_delayed_operations") == 2
    # "k" lost the completed entry; the one under "own0" waits for the lazy purge.
    assert gauge("sluice_purgatory_size") == 5
    clock.advance(1.0)
    assert gauge("sluice_purgatory_delayed_operations") == 0


def test_many_operations_share_one_timer_call():
    clock, purgatory, state, events = make_purgatory()
    for i in range(500):
        purgatory.try_complete_else_watch(
            Waiter(str(i), 0.2 + (i % 50) * 0.01, state, i % 7, 1, events), [i % 7])
    assert len(clock.getDelayedCalls()) == 1
    for key in range(3):
        state[key] = 1
        purgatory.check_and_complete(key)
    completed = len(events)
    clock.advance(1.0)
    assert sum(1 for kind, _ in events if kind == "expire") == 500 - completed
    assert purgatory.delayed == 0 and clock.getDelayedCalls() == []


def test_checking_many_keys_tries_each_operation_once():
    clock, purgatory, state, events = make_purgatory()
    wide = Waiter("wide", 5.0, state, "k0", 1, events)  # watched under 1,000 keys
    keys = [f"k{i}" for i in range(1000)]
    assert purgatory.try_complete_else_watch(wide, keys) is False
    narrow = Waiter("narrow", 5.0, state, "k7", 1, events)
    purgatory.try_complete_else_watch(narrow, ["k7"])
    tries_before = wide.tries
    assert purgatory.check_and_complete_keys(keys + ["unknown"]) == 0
    assert wide.tries == tries_before + 1 and narrow.tries == 3  # 2 on entry, 1 now
    state["k0"] = state["k7"] = 1
    assert purgatory.check_and_complete_keys(reversed(keys)) == 2
    assert sorted(events) == [("complete", "narrow"), ("complete", "wide")]
    assert purgatory.watched("k0") == 0 and purgatory.delayed == 0


def test_a_fetch_just_checked_skips_only_the_first_try():
    """DelayedFetch(just_checked=True): the caller has just found too little, so the first try
    (before watching) does not ask again; the try after watching and later triggers do."""
    clock, purgatory, _, _ = make_purgatory()
    available = [0]
    asked: list[int] = []
    answered: list[bool] = []

    def count() -> int:
        asked.append(available[0])
        return available[0]

    op = DelayedFetch(0.5, 1, count, lambda: answered.append(True), just_checked=True)
    assert purgatory.try_complete_else_watch(op, ["t-0", "t-1"]) is False
    assert asked == [0]  # the try after watching, not the one before
    available[0] = 1
    assert purgatory.check_and_complete("t-1") == 1
    assert asked == [0, 1] and answered == [True]

    # Data that arrived between the caller's check and the watch is still seen: the try after
    # watching completes the fetch at once.
    early = DelayedFetch(0.5, 1, lambda: 1, lambda: answered.append(True), just_checked=True)
    assert purgatory.try_complete_else_watch(early, ["t-0"]) is True
    assert answered == [True, True] and purgatory.delayed == 0
