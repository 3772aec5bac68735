"""The one exponential-backoff rule (broker_core.backoff): doubling, cap, injected jitter."""

from __future__ import annotations

import random

import pytest

from broker_core.backoff import Backoff, exponential_backoff


def test_the_wait_doubles_from_the_initial_one_up_to_the_cap():
    assert [exponential_backoff(n, 100, 1000) for n in range(1, 7)] == [
        100, 200, 400, 800, 1000, 1000]


def test_a_huge_retry_number_waits_the_cap_without_overflowing():
    assert exponential_backoff(10**9, 0.05, 2.0) == 2.0
    assert exponential_backoff(10**9, 1, 2**31 - 1) == 2**31 - 1


def test_a_zero_initial_wait_stays_zero():
    assert exponential_backoff(40, 0, 1000) == 0


def test_retry_numbers_start_at_one():
    with pytest.raises(ValueError, match="start at 1"):
        exponential_backoff(0, 100, 1000)


def test_jitter_is_added_after_the_cap_from_the_injected_source():
    rng, twin = random.Random(7), random.Random(7)
    waits = [exponential_backoff(n, 20, 1000, jitter=20, rng=rng) for n in range(1, 200)]
    assert waits == [min(1000, 20 * 2 ** (n - 1)) + twin.random() * 20 for n in range(1, 200)]
    assert all(min(1000, 20 * 2 ** (n - 1)) <= w < min(1000, 20 * 2 ** (n - 1)) + 20
               for n, w in zip(range(1, 200), waits, strict=True))


def test_the_same_seed_gives_the_same_waits():
    def waits(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [exponential_backoff(n, 20, 1000, jitter=20, rng=rng) for n in range(1, 20)]

    assert waits(3) == waits(3) != waits(4)


def test_jitter_without_a_random_source_is_refused():
    with pytest.raises(ValueError, match="random source"):
        exponential_backoff(1, 20, 1000, jitter=5)


def test_a_backoff_counts_its_retries_and_starts_over_after_a_reset():
    b = Backoff(0.05, 1.0)
    assert [b.next_wait() for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.retries == 7
    b.reset()
    assert b.retries == 0 and b.next_wait() == 0.05


def test_a_jittered_backoff_draws_from_its_source():
    rng, twin = random.Random(11), random.Random(11)
    b = Backoff(10, 100, jitter=5, rng=rng)
    assert [b.next_wait() for _ in range(5)] == [
        min(100, 10 * 2 ** k) + twin.random() * 5 for k in range(5)]
