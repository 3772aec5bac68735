"""The request-memory pool and one connection's budget in it: reservations fit or wait, waiters
are served oldest first among those that fit, a closed connection gives everything back and is
never granted."""

from __future__ import annotations

import pytest

from broker_core.server.memory_pool import ConnectionBudget, MemoryPool


def test_reservations_that_fit_are_granted_at_once_and_counted():
    pool = MemoryPool(100)
    assert pool.try_reserve(60, lambda: None)
    assert pool.try_reserve(40, lambda: None)
    assert (pool.in_use, pool.waiting) == (100, 0)
    pool.release(100)
    assert pool.in_use == 0


def test_a_reservation_that_does_not_fit_waits_until_enough_is_released():
    pool = MemoryPool(100)
    granted = []
    assert pool.try_reserve(80, lambda: None)
    assert not pool.try_reserve(50, lambda: granted.append("b"))
    assert (pool.in_use, pool.waiting, granted) == (80, 1, [])
    pool.release(20)  # 60 in use: 50 still does not fit
    assert granted == []
    pool.release(20)  # 40 in use: now it does
    assert (granted, pool.in_use, pool.waiting) == (["b"], 90, 0)


def test_waiters_are_served_oldest_first_among_those_that_fit():
    pool = MemoryPool(100)
    granted = []
    assert pool.try_reserve(100, lambda: None)
    for name, size in (("big", 90), ("small", 10), ("mid", 50), ("tiny", 5)):
        assert not pool.try_reserve(size, lambda n=name: granted.append(n))
    pool.release(60)  # 40 in use: big (90) does not fit; small and mid (10 + 50) do
    assert granted == ["small", "mid"]
    assert pool.in_use == 100
    pool.release(100)  # everything free: big (oldest) first, then tiny
    assert granted == ["small", "mid", "big", "tiny"]
    assert pool.in_use == 95


def test_a_small_request_is_not_stuck_behind_a_large_waiter():
    pool = MemoryPool(100)
    assert pool.try_reserve(70, lambda: None)
    assert not pool.try_reserve(50, lambda: None)  # waits
    assert pool.try_reserve(20, lambda: None)  # fits beside: granted at once
    assert pool.in_use == 90


def test_a_cancelled_waiter_is_never_granted():
    pool = MemoryPool(10)
    granted = []
    waiter = lambda: granted.append(1)  # noqa: E731
    assert pool.try_reserve(10, lambda: None)
    assert not pool.try_reserve(5, waiter)
    pool.cancel(waiter)
    pool.release(10)
    assert (granted, pool.in_use, pool.waiting) == ([], 0, 0)


def test_a_grant_callback_may_release_and_reserve_again():
    pool = MemoryPool(10)
    order = []

    def first():
        order.append("first")
        pool.release(8)  # gives its bytes straight back: the second waiter then fits

    assert pool.try_reserve(10, lambda: None)
    assert not pool.try_reserve(8, first)
    assert not pool.try_reserve(9, lambda: order.append("second"))
    pool.release(10)
    assert order == ["first", "second"]
    assert pool.in_use == 9


def test_unbounded_pool_grants_everything_and_still_counts():
    pool = MemoryPool(None)
    assert pool.try_reserve(1 << 40, lambda: None)
    assert pool.in_use == 1 << 40


def test_bad_sizes_are_refused():
    pool = MemoryPool(10)
    with pytest.raises(ValueError):
        pool.try_reserve(11, lambda: None)  # could never fit: configuration forbids it
    with pytest.raises(ValueError):
        pool.try_reserve(-1, lambda: None)
    with pytest.raises(ValueError):
        pool.release(1)  # nothing reserved
    with pytest.raises(ValueError):
        MemoryPool(0)


def test_budget_holds_admitted_frames_and_gives_them_back_when_done():
    pool = MemoryPool(100)
    budget = ConnectionBudget(pool, lambda: None)
    assert budget.admit(30) and budget.admit(20)
    assert (budget.held, pool.in_use) == (50, 50)
    budget.done(30)
    assert (budget.held, pool.in_use) == (20, 20)


def test_budget_waits_then_calls_back_once_granted():
    pool = MemoryPool(100)
    granted = []
    other = ConnectionBudget(pool, lambda: None)
    budget = ConnectionBudget(pool, lambda: granted.append(True))
    assert other.admit(90)
    assert not budget.admit(20)
    assert budget.waiting and budget.held == 0
    with pytest.raises(RuntimeError):
        budget.admit(1)  # one frame waits at a time
    other.done(90)
    assert granted == [True]
    assert (budget.waiting, budget.held, pool.in_use) == (False, 20, 20)


def test_closing_a_budget_releases_what_it_holds_and_stops_waiting():
    pool = MemoryPool(100)
    granted = []
    holder = ConnectionBudget(pool, lambda: None)
    waiter = ConnectionBudget(pool, lambda: granted.append(True))
    assert holder.admit(60)
    assert not waiter.admit(50)
    waiter.close()
    holder.close()
    assert (pool.in_use, pool.waiting, granted) == (0, 0, [])
    holder.close()  # idempotent
    holder.done(10)  # late completions after close change nothing
    assert pool.in_use == 0


def test_one_host_holds_at_most_its_cap_and_waits_while_others_are_served():
    """Reserving at the size prefix lets a peer hold memory it never sends: a per-host cap
    keeps one address from taking the whole pool however many connections it opens."""
    pool = MemoryPool(300, host_capacity=150)
    granted = []
    assert pool.try_reserve(100, lambda: None, "10.0.0.1")
    assert not pool.try_reserve(100, lambda: granted.append("a2"), "10.0.0.1")  # over its cap
    assert pool.try_reserve(100, lambda: None, "10.0.0.2")  # another host is served
    assert pool.per_host == {"10.0.0.1": 100, "10.0.0.2": 100} and pool.in_use == 200
    pool.release(100, "10.0.0.2")  # the pool has room, but 10.0.0.1's cap does not
    assert granted == []
    pool.release(100, "10.0.0.1")
    assert granted == ["a2"] and pool.per_host == {"10.0.0.1": 100}
    pool.release(100, "10.0.0.1")
    assert pool.per_host == {} and pool.in_use == 0


def test_a_frame_larger_than_the_host_cap_is_refused_and_the_cap_never_exceeds_the_pool():
    with pytest.raises(ValueError, match="per-host cap"):
        MemoryPool(300, host_capacity=100).try_reserve(101, lambda: None, "h")
    assert MemoryPool(100, host_capacity=500).host_capacity == 100
    assert MemoryPool(None, host_capacity=5).try_reserve(5, lambda: None, "h")


def test_a_budget_gives_each_frame_back_to_the_pool_and_host_it_was_reserved_in():
    before_login, listeners = MemoryPool(10, host_capacity=5), MemoryPool(100, host_capacity=50)
    budget = ConnectionBudget(before_login, lambda: None, host="10.0.0.1")
    assert budget.admit(4)  # the login
    budget.pool = listeners  # logged in: the next frames reserve from the listeners' pool
    assert budget.admit(40)
    assert (before_login.per_host, listeners.per_host) == ({"10.0.0.1": 4}, {"10.0.0.1": 40})
    budget.done(4)
    assert before_login.in_use == 0 and listeners.in_use == 40
    budget.close()
    assert listeners.in_use == 0 and listeners.per_host == {}
