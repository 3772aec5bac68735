"""The Ping scheduler: a priority queue of due times on an injected clock."""

from __future__ import annotations

from twisted.internet import task

from coordinator.heartbeat import HeartbeatScheduler


def make():
    clock = task.Clock()
    fired: list[tuple[float, str]] = []
    s = HeartbeatScheduler(clock, lambda key: fired.append((clock.seconds(), key)))
    return clock, fired, s


def test_each_key_fires_every_interval_with_one_timer():
    clock, fired, s = make()
    s.add("a", 1.0)
    s.add("b", 3.0)
    clock.pump([0.5] * 12)
    assert [t for t, k in fired if k == "a"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [t for t, k in fired if k == "b"] == [3.0, 6.0]
    assert len(clock.getDelayedCalls()) == 1


def test_removed_keys_stop_and_readding_replaces_the_schedule():
    clock, fired, s = make()
    s.add("a", 1.0)
    s.add("b", 1.0)
    clock.advance(1.0)
    s.remove("b")
    s.add("a", 2.0)  # new interval from now
    clock.pump([1.0] * 4)
    assert [(t, k) for t, k in fired] == [(1.0, "a"), (1.0, "b"), (3.0, "a"), (5.0, "a")]
    assert len(s) == 1 and "b" not in s


def test_a_callback_may_remove_its_own_key_and_failures_do_not_stop_the_loop():
    clock = task.Clock()
    seen = []
    s: HeartbeatScheduler

    def fire(key):
        seen.append(key)
        if key == "once":
            s.remove(key)
        if key == "boom":
            raise RuntimeError("bad consumer")

    s = HeartbeatScheduler(clock, fire)
    s.add("once", 1.0)
    s.add("boom", 1.0)
    s.add("ok", 1.0)
    clock.pump([1.0] * 3)
    assert seen.count("once") == 1 and seen.count("ok") == 3 and seen.count("boom") == 3


def test_a_late_reactor_does_not_cause_a_burst():
    clock, fired, s = make()
    s.add("a", 1.0)
    clock.advance(10.0)  # the reactor was blocked for 10 intervals
    assert len(fired) == 1
    clock.advance(1.0)
    assert [t for t, _ in fired] == [10.0, 11.0]


def test_paused_scheduler_fires_nothing_and_stop_disarms():
    clock, fired, s = make()
    s.add("a", 1.0)
    s.paused = True
    clock.pump([1.0] * 3)
    assert fired == []
    s.paused = False
    clock.advance(1.0)
    assert len(fired) == 1
    s.stop()
    assert clock.getDelayedCalls() == [] and len(s) == 0


def test_scales_to_ten_thousand_keys_with_one_timer():
    clock, fired, s = make()
    for i in range(10000):
        s.add(i, 10.0, first_in_s=i / 1000.0)
    clock.pump([0.5] * 40)  # 20 s
    per_key = {}
    for _, k in fired:
        per_key[k] = per_key.get(k, 0) + 1
    assert len(per_key) == 10000 and set(per_key.values()) <= {2, 3}
    assert len(clock.getDelayedCalls()) == 1
