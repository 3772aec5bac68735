"""Group and consumer registries: membership indexes, forward-only offsets owned by the
reporting member, a Kafka client's commit extras, empty-group removal after a grace period."""

from __future__ import annotations

import json

import pytest

from coordinator.registry import ConsumerRegistry, DuplicateConsumer, Registries
from coordinator.topic_count import parse


def member(group: str, cid: str, sub: dict, pattern: str = "static") -> ConsumerRegistry:
    text = json.dumps({"version": 1, "pattern": pattern, "subscription": sub})
    return ConsumerRegistry(group, cid, parse(text), text, True, "smallest", 6000)


def test_members_index_their_groups_by_topic_and_wildcard():
    r = Registries()
    a, b = member("g", "a", {"t": 1}), member("g", "b", {"t": 1, "u": 2})
    w = member("h", "w", {"logs-.*": 1}, "white_list")
    for m in (a, b, w):
        r.add_member(m, 0.0)
    assert r.consumers == 3
    assert r.groups_per_topic == {"t": {"g"}, "u": {"g"}}
    assert r.wildcard_groups == {"h"}
    assert r.interested("t") == {"g"}
    assert r.interested("logs-x") == {"h"}
    assert r.groups["h"].topics(["logs-x", "other"]) == {"logs-x"}
    r.remove_member(b, 1.0)
    assert r.groups_per_topic == {"t": {"g"}}
    r.remove_member(w, 1.0)
    assert r.wildcard_groups == set() and r.interested("logs-x") == set()


def test_duplicate_consumer_id_is_refused_and_changes_nothing():
    r = Registries()
    first = member("g", "a", {"t": 1})
    r.add_member(first, 0.0)
    with pytest.raises(DuplicateConsumer):
        r.add_member(member("g", "a", {"u": 1}), 0.0)
    assert r.groups["g"].members == {"a": first} and r.consumers == 1
    assert "u" not in r.groups_per_topic


def test_removing_a_stale_registry_object_is_a_no_op():
    r = Registries()
    a = member("g", "a", {"t": 1})
    r.add_member(a, 0.0)
    assert r.remove_member(member("g", "a", {"t": 1}), 1.0) is None
    assert r.consumers == 1


def test_offsets_are_taken_only_for_owned_partitions_and_only_forward():
    r = Registries()
    a, b = member("g", "a", {"t": 1}), member("g", "b", {"t": 1})
    g = r.add_member(a, 0.0)
    r.add_member(b, 0.0)
    a.owned = {("t", 0): "a-0"}
    assert g.record_offsets(a, [("t", 0, 10), ("t", 1, 5)]) == 1
    assert g.offsets == {("t", 0): 10} and g.dirty == {("t", 0)}
    assert g.record_offsets(a, [("t", 0, 7)]) == 0  # backwards: ignored
    assert g.record_offsets(b, [("t", 0, 50)]) == 0  # not b's partition
    assert g.offsets[("t", 0)] == 10
    g.note_committed(("t", 0), 10)
    assert not g.offset_updated
    g.note_committed(("t", 1), 30)  # read from ZooKeeper
    assert g.start_offset(("t", 1)) == 30 and g.start_offset(("t", 2)) == -1
    g.note_committed(("t", 2), -1)  # znode exists but unreadable
    assert g.start_offset(("t", 2)) == -1 and g.committed[("t", 2)] == -1


def test_commit_extras_travel_with_their_offset():
    r = Registries()
    g = r.group("k")
    tp = ("t", 0)
    g.set_offset(tp, 5, (3, "m"))
    assert g.extras == {tp: (3, "m")} and g.dirty == {tp}
    g.note_written(tp, 5, (3, "m"))
    assert not g.dirty and g.committed_extras == {tp: (3, "m")}
    # The same offset with other metadata is a change to write.
    g.set_offset(tp, 5, (3, "n"))
    assert g.dirty == {tp}
    # A write of the old value finishing meanwhile does not make it clean, nor does reading
    # the old value back.
    g.note_written(tp, 5, (3, "m"))
    g.note_committed(tp, 5, (3, "m"))
    assert g.dirty == {tp} and g.extras[tp] == (3, "n")
    # No extras: nothing held for them.
    g.set_offset(tp, 6)
    assert tp not in g.extras
    g.note_written(tp, 6, (-1, ""))
    assert not g.dirty and tp not in g.committed_extras
    # Read from the store when nothing is pending: taken with its extras.
    g.note_committed(("t", 1), 9, (1, "s"))
    assert (g.offsets[("t", 1)], g.extras[("t", 1)]) == (9, (1, "s"))
    g.forget_offset(("t", 1))
    assert ("t", 1) not in g.extras and ("t", 1) not in g.committed_extras
    g.forget_offsets()
    assert not (g.offsets or g.committed or g.extras or g.committed_extras or g.dirty)


def test_a_thin_members_offset_drops_the_extras_of_the_one_before():
    r = Registries()
    a = member("g", "a", {"t": 1})
    g = r.add_member(a, 0.0)
    a.owned = {("t", 0): "a-0"}
    g.set_offset(("t", 0), 5, (2, "kafka"))
    g.record_offsets(a, [("t", 0, 8)])
    assert g.offsets[("t", 0)] == 8 and ("t", 0) not in g.extras


def test_group_state():
    r = Registries()
    a = member("g", "a", {"t": 1})
    g = r.add_member(a, 0.0)
    assert g.state == "rebalancing"  # a has not been started
    a.started = True
    assert g.state == "stable"
    g.rebalance_initiated = True
    assert g.state == "rebalancing"
    g.rebalance_initiated = False
    r.remove_member(a, 5.0)
    assert g.state == "empty" and g.empty_since == 5.0


def test_empty_groups_are_removed_after_the_grace_period_only_when_idle():
    r = Registries()
    a, b = member("g", "a", {"t": 1}), member("h", "b", {"t": 1})
    r.add_member(a, 0.0)
    r.add_member(b, 0.0)
    r.remove_member(a, 10.0)
    r.remove_member(b, 10.0)
    r.groups["h"].dirty.add(("t", 0))  # offsets still to commit: keep it
    assert r.expire_empty(15.0, 10.0) == []
    assert r.expire_empty(20.0, 10.0) == ["g"]
    assert set(r.groups) == {"h"}
    r.groups["h"].dirty.clear()
    r.groups["h"].curr_rebalancer = 1  # a rebalance pending: keep it
    assert r.expire_empty(30.0, 10.0) == []
    r.groups["h"].curr_rebalancer = None
    assert r.expire_empty(30.0, 10.0) == ["h"]
    # A member joining resets the clock.
    r.add_member(member("g", "c", {"t": 1}), 40.0)
    assert r.groups["g"].empty_since is None
