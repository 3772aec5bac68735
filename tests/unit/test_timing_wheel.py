"""The hierarchical timing wheel, driven by ``task.Clock`` only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import task

from broker_core.timing_wheel import CallbackTask, TimerTask, TimingWheel


class Recorder(TimerTask):
    """A task that appends ``(name, clock time)`` to a shared list when it runs."""

    def __init__(self, name: str, clock: task.Clock, fired: list) -> None:
        self.name = name
        self.clock = clock
        self.fired = fired

    def run(self) -> None:
        self.fired.append((self.name, self.clock.seconds()))


def make_wheel(tick_s: float = 0.005, wheel_size: int = 64, start: float = 0.0):
    """Returns ``(clock, wheel, fired)``: a Clock at ``start``, a wheel on it, a fired list."""
    clock = task.Clock()
    clock.advance(start)
    return clock, TimingWheel(clock, tick_s=tick_s, wheel_size=wheel_size), []


def test_task_runs_at_its_deadline_not_before():
    clock, wheel, fired = make_wheel()
    assert wheel.add(Recorder("a", clock, fired), 0.2)
    clock.advance(0.199)
    assert fired == []
    clock.advance(0.001)
    assert fired == [("a", pytest.approx(0.2))]
    assert len(wheel) == 0


def test_unaligned_deadline_runs_within_one_tick_after_it():
    clock, wheel, fired = make_wheel()
    wheel.add(Recorder("a", clock, fired), 0.0123)
    clock.advance(0.0122)
    assert fired == []
    clock.advance(0.0001)  # deadline reached, but it is inside the 10-15 ms tick
    clock.advance(0.0027)
    assert fired == [("a", pytest.approx(0.015))]


def test_expired_deadline_is_refused_so_the_caller_runs_it():
    clock, wheel, fired = make_wheel(start=5.0)
    t = Recorder("late", clock, fired)
    assert wheel.add(t, 5.0) is False
    assert wheel.add(t, 4.0) is False
    assert not t.scheduled and len(wheel) == 0
    assert clock.getDelayedCalls() == []


def test_deadlines_on_three_levels_fire_in_order_at_their_times():
    clock, wheel, fired = make_wheel()
    # Added out of order: 10 min (level 2), 10 ms (level 0), 3 s (level 1).
    wheel.add(Recorder("10min", clock, fired), 600.0)
    wheel.add(Recorder("10ms", clock, fired), 0.010)
    wheel.add(Recorder("3s", clock, fired), 3.0)
    assert wheel.levels == 3
    for _ in range(601 * 20):  # 50 ms steps, as a busy reactor would advance
        clock.advance(0.05)
    assert [name for name, _ in fired] == ["10ms", "3s", "10min"]
    times = dict(fired)
    assert times["10ms"] == pytest.approx(0.05)  # first step past 10 ms
    assert 3.0 <= times["3s"] < 3.05 + 1e-9
    assert 600.0 <= times["10min"] < 600.05 + 1e-9


def test_one_clock_call_for_many_tasks():
    clock, wheel, fired = make_wheel()
    for i in range(1000):
        wheel.add(Recorder(str(i), clock, fired), 0.1 + i * 0.01)
    assert len(clock.getDelayedCalls()) == 1
    assert wheel.next_expiry == pytest.approx(0.1)
    clock.advance(20)
    assert len(fired) == 1000
    assert clock.getDelayedCalls() == []


def test_earlier_task_rearms_the_single_call():
    clock, wheel, fired = make_wheel()
    wheel.add(Recorder("late", clock, fired), 1.0)
    wheel.add(Recorder("early", clock, fired), 0.05)
    calls = clock.getDelayedCalls()
    assert len(calls) == 1 and calls[0].getTime() == pytest.approx(0.05)


def test_cancel_removes_the_task_and_disarms_an_empty_wheel():
    clock, wheel, fired = make_wheel()
    t = Recorder("a", clock, fired)
    wheel.add(t, 0.5)
    assert t.scheduled and len(wheel) == 1
    t.cancel()
    assert not t.scheduled and len(wheel) == 0
    assert clock.getDelayedCalls() == []
    clock.advance(1)
    assert fired == []
    t.cancel()  # a second cancel is harmless


def test_call_is_armed_for_the_earliest_non_empty_bucket():
    clock, wheel, fired = make_wheel()
    first = Recorder("first", clock, fired)
    wheel.add(first, 0.1)
    wheel.add(Recorder("second", clock, fired), 0.2)
    first.cancel()
    # Re-arming happens lazily on the next add or expiry; it skips the emptied bucket.
    wheel.add(Recorder("third", clock, fired), 0.3)
    assert wheel.next_expiry == pytest.approx(0.2)
    clock.advance(0.3)
    assert [n for n, _ in fired] == ["second", "third"]


def test_task_cancelled_by_an_earlier_task_in_the_same_advance_does_not_run():
    clock, wheel, fired = make_wheel()
    victim = Recorder("victim", clock, fired)
    wheel.add(CallbackTask(victim.cancel), 0.1)
    wheel.add(victim, 0.2)
    clock.advance(1)  # both due in one advance; the canceller runs first
    assert fired == []


def test_task_may_add_tasks_while_running():
    clock, wheel, fired = make_wheel()

    def chain(n: int) -> None:
        fired.append((n, clock.seconds()))
        if n < 3:
            assert wheel.add(CallbackTask(chain, n + 1), clock.seconds() + 1.0)

    wheel.add(CallbackTask(chain, 0), 1.0)
    clock.pump([0.5] * 10)
    assert [n for n, _ in fired] == [0, 1, 2, 3]
    assert [t for _, t in fired] == pytest.approx([1.0, 2.0, 3.0, 4.0])


def test_failing_task_is_logged_and_others_still_run():
    from twisted.logger import capturedLogs

    clock, wheel, fired = make_wheel()
    wheel.add(CallbackTask(lambda: 1 / 0), 0.1)
    wheel.add(Recorder("ok", clock, fired), 0.1)
    with capturedLogs() as events:
        clock.advance(0.1)
    assert [n for n, _ in fired] == ["ok"]
    assert any(e.get("log_failure") is not None for e in events)


def test_adding_a_scheduled_task_twice_is_refused():
    clock, wheel, fired = make_wheel()
    t = Recorder("a", clock, fired)
    wheel.add(t, 1.0)
    with pytest.raises(ValueError, match="already scheduled"):
        wheel.add(t, 2.0)


def test_a_task_can_be_scheduled_again_after_it_ran():
    clock, wheel, fired = make_wheel()
    t = Recorder("a", clock, fired)
    wheel.add(t, 1.0)
    clock.advance(1.0)
    assert wheel.add(t, 2.0)
    clock.advance(1.0)
    assert [n for n, _ in fired] == ["a", "a"]


def test_stop_returns_waiting_tasks_without_running_them():
    clock, wheel, fired = make_wheel()
    a, b = Recorder("a", clock, fired), Recorder("b", clock, fired)
    wheel.add(b, 30.0)
    wheel.add(a, 0.3)
    assert wheel.stop() == [a, b]
    assert len(wheel) == 0 and clock.getDelayedCalls() == []
    clock.advance(100)
    assert fired == []


def test_stop_from_a_running_task_keeps_the_rest_of_that_advance_from_running():
    clock, wheel, fired = make_wheel()
    removed = []
    wheel.add(CallbackTask(lambda: removed.extend(wheel.stop())), 0.1)
    later = Recorder("later", clock, fired)
    wheel.add(later, 0.2)
    clock.advance(1)
    assert fired == [] and removed == [later]


def test_works_on_a_clock_far_from_zero():
    # The real reactor's clock is seconds since the epoch.
    clock, wheel, fired = make_wheel(start=1_790_000_000.123)
    deadline = clock.seconds() + 0.5
    wheel.add(Recorder("a", clock, fired), deadline)
    clock.advance(0.499)
    assert fired == []
    clock.advance(0.006)  # the deadline is not on a tick boundary: at most one tick late
    assert len(fired) == 1
    assert deadline <= fired[0][1] <= deadline + 0.005


def test_idle_gap_then_new_tasks():
    clock, wheel, fired = make_wheel()
    wheel.add(Recorder("a", clock, fired), 0.1)
    clock.advance(1)
    clock.advance(3600)  # a long idle time; the wheel's levels catch up lazily
    wheel.add(Recorder("b", clock, fired), clock.seconds() + 0.02)
    clock.advance(0.019)
    assert [n for n, _ in fired] == ["a"]
    clock.advance(0.001)
    assert [n for n, _ in fired] == ["a", "b"]


def test_invalid_parameters():
    clock = task.Clock()
    with pytest.raises(ValueError, match="tick_s"):
        TimingWheel(clock, tick_s=0)
    with pytest.raises(ValueError, match="wheel_size"):
        TimingWheel(clock, wheel_size=1)


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=50.0),  # delay from "now" when added
            st.floats(min_value=0.0, max_value=2.0),  # clock step after adding
            st.booleans(),  # cancel it right away?
        ),
        min_size=1, max_size=60,
    ),
    tick_s=st.sampled_from([0.001, 0.005, 0.01]),
    wheel_size=st.sampled_from([2, 3, 8, 64]),
)
def test_model_every_task_fires_once_within_a_tick_after_its_deadline(ops, tick_s, wheel_size):
    """Against a plain model: each surviving task runs exactly once, never before its deadline,
    and no later than one tick plus the clock step after it; cancelled tasks never run."""
    clock = task.Clock()
    wheel = TimingWheel(clock, tick_s=tick_s, wheel_size=wheel_size)
    fired: list = []
    expected: dict[int, float] = {}
    step = 0.05
    for i, (delay, advance, cancel) in enumerate(ops):
        deadline = clock.seconds() + delay
        t = Recorder(i, clock, fired)
        if wheel.add(t, deadline):
            if cancel:
                t.cancel()
            else:
                expected[i] = deadline
        else:
            assert deadline <= clock.seconds() + 0.5e-6  # the wheel counts whole microseconds
        # Advance in small steps so firing times are observable.
        remaining = advance
        while remaining > 0:
            clock.advance(min(step, remaining))
            remaining -= step
    for _ in range(int(60 / step) + 2):
        clock.advance(step)
    names = [n for n, _ in fired]
    assert sorted(names) == sorted(expected)  # exactly once each, cancelled never
    for name, at in fired:
        assert at >= expected[name] - 1e-6
        assert at <= expected[name] + tick_s + step + 1e-6
    assert len(wheel) == 0 and clock.getDelayedCalls() == []
