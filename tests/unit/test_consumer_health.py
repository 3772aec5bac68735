"""The consumer's problem tracker (consumer_client/consumer_health.py), walked with explicit
times: when it warns, when a problem becomes an error, and when it clears."""

from __future__ import annotations

from consumer_client.consumer_health import HealthTracker


def test_one_warning_per_reason_then_a_reminder():
    h = HealthTracker(bound_s=60.0, reminder_s=30.0)
    h.lost(0.0)
    assert h.failed_attempt("a:9092 refused", "metadata:ConnectionRefusedError", 0.0)
    for t in (0.1, 0.3, 2.3, 29.9):  # every retry, same kind of failure
        assert not h.failed_attempt(f"a:9092 refused ({t})", "metadata:ConnectionRefusedError", t)
    assert h.reason == "a:9092 refused (29.9)"  # the latest reason is kept for the error
    assert h.failed_attempt("no coordinator", "coordinator:COORDINATOR_NOT_AVAILABLE", 31.0)
    assert not h.failed_attempt("no coordinator", "coordinator:COORDINATOR_NOT_AVAILABLE", 60.9)
    assert h.failed_attempt("no coordinator", "coordinator:COORDINATOR_NOT_AVAILABLE", 61.0)


def test_unreachable_becomes_overdue_at_the_bound_not_before():
    h = HealthTracker(bound_s=1.0)
    h.lost(10.0)
    h.lost(10.5)  # still the same outage: its start does not move
    assert h.next_check(10.0) == 1.0
    assert not h.unreachable_overdue(10.999)
    assert h.unreachable_overdue(11.0)
    assert h.next_check(11.0) is None  # nothing more to wait for


def test_joining_clears_the_outage_and_its_warning():
    h = HealthTracker(bound_s=1.0)
    h.lost(-1.0)
    assert not h.joined()  # a start without trouble: nothing to say
    h.failed_attempt("refused", "k", 0.0)
    assert h.joined()  # the warned outage is over: worth saying
    assert h.unreachable_since is None and h.reason is None
    assert not h.unreachable_overdue(100.0)
    h.lost(100.0)
    assert h.failed_attempt("refused", "k", 100.0)  # a new outage is warned about again
    assert not h.unreachable_overdue(100.5) and h.unreachable_overdue(101.0)


def test_missing_topics_warned_on_change_overdue_each_from_its_own_start():
    h = HealthTracker(bound_s=5.0, reminder_s=60.0)
    assert h.topics_checked({"a", "b"}, {"a"}, 0.0)
    assert not h.topics_checked({"a", "b"}, {"a"}, 1.0)  # the same answer again
    assert h.topics_checked({"b"}, {"b"}, 2.0)  # b is gone too: a new set, a new warning
    assert h.missing == {"a": 0.0, "b": 2.0}
    assert h.overdue_topics(4.9) == [] and h.overdue_topics(5.0) == ["a"]
    assert h.overdue_topics(7.0) == ["a", "b"]
    assert h.next_check(1.0) == 4.0
    assert not h.reminder_due(30.0) and h.reminder_due(62.0)
    assert h.topics_checked({"a", "b"}, {"a"}, 65.0) and not h.cleared  # b created: new set
    assert not h.topics_checked({"a", "b"}, set(), 70.0) and h.cleared  # a too
    assert h.missing == {} and h.overdue_topics(100.0) == [] and h.next_check(70.0) is None
