"""The admin tools ask each group's own coordinator: the groups of one request are batched per
coordinator (one connection and one request per broker), in a stable order."""

from __future__ import annotations

from sluice_tools.admin import by_coordinator

A, B, C = (1, "h1", 9092), (2, "h2", 9092), (3, "h3", 9092)


def test_groups_on_two_coordinators_make_two_batches_in_first_seen_order():
    batches = by_coordinator({"g1": B, "g2": A, "g3": B, "g4": A, "g5": C})
    assert batches == [(B, ["g1", "g3"]), (A, ["g2", "g4"]), (C, ["g5"])]


def test_one_coordinator_is_one_batch_and_none_is_no_batch():
    assert by_coordinator({"x": A, "y": A}) == [(A, ["x", "y"])]
    assert by_coordinator({}) == []


def test_a_broker_that_moved_is_a_different_address():
    # the same id at another address (a restarted broker) is asked separately
    moved = (1, "h9", 9093)
    assert by_coordinator({"a": A, "b": moved}) == [(A, ["a"]), (moved, ["b"])]
