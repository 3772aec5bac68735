"""Fetch sessions (KIP-227), both halves as pure objects: the leader's cache resolving requests
and choosing what an answer carries, and the follower's handler building requests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from broker_core.replica.fetch_session import (
    MAX_EPOCH,
    FetchSessionCache,
    FetchSessionHandler,
    next_epoch,
)


@dataclass
class Result:
    """The fields of a FetchResult the session looks at."""

    error: str | None = None
    high_watermark: int = 0
    log_start_offset: int = 0
    records: bytes = b""


def make_cache(**kw) -> FetchSessionCache:
    ids = itertools.count(100)
    return FetchSessionCache(new_id=lambda: next(ids), **kw)


A, B, C = ("t", 0), ("t", 1), ("u", 0)


def entry(tp, offset, max_bytes=1000, epoch=3):
    return (tp[0], tp[1], offset, max_bytes, epoch)


def test_epochs_count_from_one_and_wrap_past_int32():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1


# -- the leader's cache ----------------------------------------------------------------------------

def test_a_follower_full_fetch_opens_a_session_a_consumer_gets_none():
    cache = make_cache()
    ctx = cache.context(2, 0, 0, [entry(A, 5), entry(B, 7)])
    assert ctx.error is None and ctx.session_id == 100 and not ctx.incremental
    assert ctx.entries == [entry(A, 5), entry(B, 7)]
    consumer = cache.context(-1, 0, 0, [entry(A, 5)])
    assert consumer.session_id == 0 and consumer.session is None
    sessionless = cache.context(3, 0, -1, [entry(A, 5)])
    assert sessionless.session_id == 0
    assert len(cache) == 1


def test_incremental_fetch_reads_the_whole_session_with_the_changes_applied():
    cache = make_cache()
    cache.context(2, 0, 0, [entry(A, 5), entry(B, 7)])
    ctx = cache.context(2, 100, 1, [entry(B, 9), entry(C, 0)], forgotten=[A])
    assert ctx.error is None and ctx.incremental and ctx.session_id == 100
    assert sorted(ctx.entries) == sorted([entry(B, 9), entry(C, 0)])
    # Named nothing: the session's partitions at their last offsets.
    assert sorted(cache.context(2, 100, 2, []).entries) == sorted([entry(B, 9), entry(C, 0)])


def test_wrong_epoch_or_unknown_session_is_an_error_and_changes_nothing():
    cache = make_cache()
    cache.context(2, 0, 0, [entry(A, 5)])
    assert cache.context(2, 100, 2, [entry(A, 6)]).error == "INVALID_FETCH_SESSION_EPOCH"
    assert cache.context(2, 555, 1, []).error == "FETCH_SESSION_ID_NOT_FOUND"
    # Another replica cannot use the session.
    assert cache.context(3, 100, 1, []).error == "FETCH_SESSION_ID_NOT_FOUND"
    ctx = cache.context(2, 100, 1, [])
    assert ctx.error is None and ctx.entries == [entry(A, 5)]


def test_epoch_minus_one_closes_the_session_and_a_new_one_replaces_the_replicas_old_one():
    cache = make_cache()
    cache.context(2, 0, 0, [entry(A, 5)])
    assert cache.context(2, 100, -1, [entry(A, 5)]).session_id == 0
    assert cache.get(100) is None
    cache.context(2, 0, 0, [entry(A, 5)])  # 101
    cache.context(3, 0, 0, [entry(A, 5)])  # 102
    cache.context(2, 0, 0, [entry(A, 6)])  # 103 supersedes 101: one fetcher per leader
    assert cache.get(101) is None and cache.get(102) and cache.get(103)
    assert len(cache) == 2


def test_the_least_recently_used_session_goes_when_the_cache_is_full():
    cache = make_cache(max_sessions=2)
    cache.context(2, 0, 0, [entry(A, 5)])  # 100
    cache.context(3, 0, 0, [entry(A, 5)])  # 101
    cache.context(2, 100, 1, [])  # 100 used last
    cache.context(4, 0, 0, [entry(A, 5)])  # 102 evicts 101
    assert cache.get(101) is None and cache.get(100) and cache.get(102)
    with pytest.raises(ValueError):
        FetchSessionCache(max_sessions=0)


def test_an_incremental_answer_carries_only_partitions_with_news():
    cache = make_cache()
    full = cache.context(2, 0, 0, [entry(A, 5), entry(B, 7), entry(C, 0)])
    rows = [("t", 0, Result(high_watermark=5)), ("t", 1, Result(high_watermark=7)),
            ("u", 0, Result(high_watermark=0))]
    assert full.select(rows) == rows  # a full answer carries everything
    inc = cache.context(2, 100, 1, [])
    same = [("t", 0, Result(high_watermark=5)), ("t", 1, Result(high_watermark=7)),
            ("u", 0, Result(high_watermark=0))]
    assert inc.select(same) == []
    news = [("t", 0, Result(high_watermark=6)),  # HW moved
            ("t", 1, Result(high_watermark=7, records=b"x")),  # records
            ("u", 0, Result(error="NOT_LEADER_OR_FOLLOWER", high_watermark=-1))]
    assert cache.context(2, 100, 2, []).select(news) == news
    # What was answered is remembered: the same figures again are no news.
    again = [("t", 0, Result(high_watermark=6)), ("t", 1, Result(high_watermark=7)),
             ("u", 0, Result(high_watermark=0, log_start_offset=3))]
    assert cache.context(2, 100, 3, []).select(again) == [again[2]]


# -- the follower's handler ------------------------------------------------------------------------

def test_the_handler_sends_full_then_only_changes_and_forgets_what_it_dropped():
    h = FetchSessionHandler()
    first = h.build({A: (5, 0, 1000, 3), B: (7, 0, 1000, 3)})
    assert (first.session_id, first.epoch, first.to_send) == (0, 0, [A, B]) and first.full
    assert h.handle_response(first, 0, 42)
    second = h.build({A: (6, 0, 1000, 3), B: (7, 0, 1000, 3)})
    assert (second.session_id, second.epoch, second.to_send, second.forgotten) == (
        42, 1, [A], [])
    assert h.handle_response(second, 0, 42)
    third = h.build({A: (6, 0, 1000, 4), C: (0, 0, 1000, 3)})  # A's epoch moved, B dropped
    assert (third.epoch, third.to_send, third.forgotten) == (2, [A, C], [B])
    assert h.handle_response(third, 0, 42)
    assert h.build({A: (6, 0, 1000, 4), C: (0, 0, 1000, 3)}).to_send == []


def test_the_handler_starts_over_after_an_error_a_reset_or_no_session():
    h = FetchSessionHandler()
    req = h.build({A: (5, 0, 1000, 3)})
    h.handle_response(req, 0, 42)
    req = h.build({A: (5, 0, 1000, 3)})
    assert not h.handle_response(req, 71, 0)  # INVALID_FETCH_SESSION_EPOCH
    assert h.build({A: (5, 0, 1000, 3)}).full
    h.handle_response(h.build({A: (5, 0, 1000, 3)}), 0, 42)
    h.reset()
    assert h.build({A: (5, 0, 1000, 3)}).full
    # A leader that grants no session (id 0): every request stays full.
    h.handle_response(h.build({A: (5, 0, 1000, 3)}), 0, 0)
    nxt = h.build({A: (5, 0, 1000, 3)})
    assert nxt.full and nxt.to_send == [A]


def test_both_halves_agree_over_a_run_of_requests():
    """The follower's requests, resolved by the leader's cache, always fetch exactly the
    follower's current partitions at their current offsets."""
    cache, h = make_cache(), FetchSessionHandler()
    states = [
        {A: (0, 0, 1000, 3), B: (0, 0, 1000, 3)},
        {A: (4, 0, 1000, 3), B: (0, 0, 1000, 3)},
        {A: (4, 0, 1000, 3)},
        {A: (4, 0, 1000, 3), C: (9, 0, 1000, 3)},
        {A: (8, 0, 1000, 3), C: (9, 0, 1000, 3)},
        {A: (8, 0, 1000, 3), B: (0, 0, 1000, 3)},  # as many partitions, one swapped
        {A: (8, 0, 1000, 3), B: (0, 0, 1000, 3)},  # nothing changed: nothing named
    ]
    for state in states:
        req = h.build(state)
        entries = [entry(tp, state[tp][0], state[tp][2], state[tp][3]) for tp in req.to_send]
        ctx = cache.context(2, req.session_id, req.epoch, entries, req.forgotten)
        assert ctx.error is None
        assert sorted(ctx.entries) == sorted(entry(tp, s[0], s[2], s[3])
                                             for tp, s in state.items())
        assert h.handle_response(req, 0, ctx.session_id)
