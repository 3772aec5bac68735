"""Spark-Kafka offsets, ranges, minPartitions splitting and rate limiting (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer_client.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetError,
    OffsetRange,
    OffsetSpec,
    batch_ranges,
    offsets_from_json_dict,
    offsets_to_json_dict,
    parse_assign,
    parse_offset_spec,
    rate_limit,
    resolve,
    split_ranges,
)


def test_words_and_json():
    assert parse_offset_spec("startingOffsets", " Earliest ") == OffsetSpec.earliest()
    assert parse_offset_spec("startingOffsets", "latest") == OffsetSpec.latest()
    spec = parse_offset_spec("startingOffsets", '{"a": {"0": 23, "1": -2}, "b": {"0": -1}}')
    assert spec == OffsetSpec("specific", {("a", 0): 23, ("a", 1): EARLIEST, ("b", 0): LATEST})


@pytest.mark.parametrize("text, words", [
    ("{not json", "malformed|expected"),
    ("[1, 2]", "JSON object"),
    ("{}", "JSON object"),
    ('{"a": [0, 1]}', "map partition numbers"),
    ('{"a": {"x": 1}}', "not a number"),
    ('{"a": {"-1": 1}}', "negative"),
    ('{"a": {"0": -3}}', "offset -3"),
    ('{"a": {"0": "5"}}', "offset '5'"),
    ('{"a": {"0": true}}', "offset True"),
])
def test_malformed_offsets_name_the_option(text, words):
    with pytest.raises(OffsetError, match="startingOffsets") as e:
        parse_offset_spec("startingOffsets", text)
    import re
    assert re.search(words, str(e.value)), str(e.value)


def test_checkpoint_json_round_trip_is_sorted():
    offsets = {("b", 10): 5, ("a", 2): 7, ("a", 10): 1}
    doc = offsets_to_json_dict(offsets)
    assert list(doc) == ["a", "b"]
    assert list(doc["a"]) == ["2", "10"]
    assert offsets_from_json_dict("checkpoint", doc) == offsets


def test_assign():
    assert parse_assign("assign", '{"t": [2, 0, 2], "u": [1]}') == {"t": [0, 2], "u": [1]}
    for bad in ('{"t": []}', '{"t": [-1]}', '{"t": "0"}', "[]", "{"):
        with pytest.raises(OffsetError, match="'assign'"):
            parse_assign("assign", bad)


def _lookups():
    earliest = {("t", 0): 3, ("t", 1): 0}
    latest = {("t", 0): 10, ("t", 1): 20}
    return (lambda ps: {p: earliest[p] for p in ps}), (lambda ps: {p: latest[p] for p in ps})


def test_resolve_words_and_specific():
    e, la = _lookups()
    tps = [("t", 0), ("t", 1)]
    assert resolve("s", OffsetSpec.earliest(), tps, e, la) == {("t", 0): 3, ("t", 1): 0}
    assert resolve("s", OffsetSpec.latest(), tps, e, la) == {("t", 0): 10, ("t", 1): 20}
    spec = OffsetSpec("specific", {("t", 0): EARLIEST, ("t", 1): 7})
    assert resolve("s", spec, tps, e, la) == {("t", 0): 3, ("t", 1): 7}


def test_resolve_refuses_partial_json_and_forbidden_sentinels():
    e, la = _lookups()
    tps = [("t", 0), ("t", 1)]
    with pytest.raises(OffsetError, match="'startingOffsets'.*missing t-1"):
        resolve("startingOffsets", OffsetSpec("specific", {("t", 0): 1}), tps, e, la)
    with pytest.raises(OffsetError, match="not subscribed t-5"):
        resolve("startingOffsets", OffsetSpec("specific", {("t", 0): 1, ("t", 1): 1,
                                                           ("t", 5): 1}), tps, e, la)
    with pytest.raises(OffsetError, match="'startingOffsets'.*latest"):
        resolve("startingOffsets", OffsetSpec("specific", {("t", 0): LATEST, ("t", 1): 1}),
                tps, e, la, allow_latest=False)
    with pytest.raises(OffsetError, match="'endingOffsets'.*earliest"):
        resolve("endingOffsets", OffsetSpec.earliest(), tps, e, la, allow_earliest=False)


def test_end_before_start_names_ending_offsets():
    assert batch_ranges({("t", 0): 1}, {("t", 0): 1}) == [OffsetRange("t", 0, 1, 1)]
    with pytest.raises(OffsetError, match="'endingOffsets': t-0 ends at 4, before.* 9"):
        batch_ranges({("t", 0): 9}, {("t", 0): 4})


def test_split_like_spark():
    # Spark's KafkaOffsetRangeCalculatorSuite: one range of 10000 into 3 -> 3333, 3333, 3334.
    r = [OffsetRange("t", 0, 1, 10001)]
    assert split_ranges(r, 3) == [OffsetRange("t", 0, 1, 3334), OffsetRange("t", 0, 3334, 6667),
                                  OffsetRange("t", 0, 6667, 10001)]
    # Enough ranges already: unchanged, minus the empty ones.
    rs = [OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 3, 3), OffsetRange("t", 2, 0, 1)]
    assert split_ranges(rs, 2) == [rs[0], rs[2]]
    assert split_ranges(rs, None) == [rs[0], rs[2]]
    # Proportional: the big partition gets most pieces, the small one at least one.
    out = split_ranges([OffsetRange("a", 0, 0, 1000), OffsetRange("b", 0, 0, 10)], 5)
    assert [r.topic for r in out].count("a") == 5 and [r.topic for r in out].count("b") == 1


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=8),
       st.integers(1, 64))
def test_split_covers_exactly(spans, n):
    ranges = [OffsetRange("t", i, s, s + size) for i, (s, size) in enumerate(spans)]
    out = split_ranges(ranges, n)
    assert all(r.size > 0 for r in out)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        covered = [o for p in pieces for o in range(p.start, p.end)]
        assert covered == list(range(r.start, r.end))


def test_rate_limit_like_spark():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 5}
    latest = {("t", 0): 90, ("t", 1): 10, ("t", 2): 5}
    assert rate_limit(start, latest, 10) == {("t", 0): 9, ("t", 1): 1, ("t", 2): 5}
    # A tiny share is rounded up: a small partition is never starved.
    assert rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10) == \
        {("t", 0): 9, ("t", 1): 1}
    # Nothing new: the latest offsets as they are.
    assert rate_limit(latest, latest, 10) == latest


@given(st.dictionaries(st.integers(0, 20), st.tuples(st.integers(0, 100), st.integers(0, 100)),
                       min_size=1), st.integers(1, 500))
def test_rate_limit_bounds(parts, limit):
    start = {("t", p): s for p, (s, _) in parts.items()}
    latest = {("t", p): s + d for p, (s, d) in parts.items()}
    end = rate_limit(start, latest, limit)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    taken = sum(end[tp] - start[tp] for tp in start)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    assert taken <= max(limit, 0) + len(start) and (taken == backlog or taken >= min(limit, 1))
    assert all(end[tp] > start[tp] for tp in start if latest[tp] > start[tp])
