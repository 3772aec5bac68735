"""Topic counts: Kafka's ZooKeeper-consumer subscription JSON, static and wildcard."""

from __future__ import annotations

import json

import pytest

from coordinator.topic_count import InvalidTopicCount, parse


def tc(pattern: str, sub: dict) -> str:
    return json.dumps({"version": 1, "pattern": pattern, "subscription": sub})


def test_static_subscription_names_topics_and_streams():
    t = parse(tc("static", {"events": 2, "audit": 1}))
    assert not t.is_wildcard
    assert t.topics(["other"]) == {"events", "audit"}  # existing or not
    assert t.thread_ids("c1", "events") == ["c1-0", "c1-1"]
    assert t.thread_ids("c1", "other") == []
    assert t.matches("audit") and not t.matches("other")


def test_white_list_matches_whole_names_and_commas_mean_or():
    t = parse(tc("white_list", {"logs-.*,audit": 3}))
    assert t.is_wildcard
    assert t.topics(["logs-a", "audit", "xlogs-a", "audit2"]) == {"logs-a", "audit"}
    assert t.thread_ids("c", "logs-a") == ["c-0", "c-1", "c-2"]


def test_black_list_takes_what_does_not_match():
    t = parse(tc("black_list", {"tmp-.*": 1}))
    assert t.topics(["tmp-1", "keep"]) == {"keep"}


def test_pattern_defaults_to_static():
    assert parse('{"subscription": {"t": 1}}').pattern == "static"


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    (tc("regex", {"t": 1}), "unknown topic count pattern"),
    ('{"version": 2, "subscription": {"t": 1}}', "version"),
    (tc("static", {}), "non-empty"),
    ('{"pattern": "static", "subscription": ["t"]}', "non-empty object"),
    (tc("static", {"t": 0}), "from 1 to"),
    (tc("static", {"t": "2"}), "from 1 to"),
    (tc("static", {"t": True}), "from 1 to"),
    (tc("static", {"bad topic": 1}), "characters"),
    (tc("white_list", {"a": 1, "b": 1}), "exactly one"),
    (tc("white_list", {"(unclosed": 1}), "does not compile"),
    ("x" * 70000, "longer than"),
])
def test_bad_topic_counts_say_what_is_wrong(text, words):
    with pytest.raises(InvalidTopicCount) as e:
        parse(text)
    assert words in str(e.value)
