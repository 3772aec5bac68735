"""Which cluster id a quorum node starts with (docs/design.md#bootstrapping), and that the
first leader of an empty log writes it into the first VoterAssignment."""

from __future__ import annotations

import random

import pytest

from broker_core.config.quorum import RaftConfig, RaftConfigError
from broker_core.raft.cluster_id import generate_cluster_id, resolve_cluster_id
from broker_core.raft.entries import VoterAssignment
from broker_core.raft.log import InMemoryRaftLog
from broker_core.raft.node import RaftNode
from broker_core.raft.roles import Role


def test_generated_ids_look_like_kafkas_and_differ():
    ids = {generate_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 22 and "=" not in i for i in ids)


def test_the_persisted_id_wins_and_a_different_given_one_is_refused():
    assert resolve_cluster_id(None, "abc", False, 2, {1, 2, 3}) == ("abc", False)
    assert resolve_cluster_id("abc", "abc", False, 2, {1, 2, 3}) == ("abc", False)
    with pytest.raises(RaftConfigError, match="does not match 'abc'"):
        resolve_cluster_id("xyz", "abc", False, 2, {1, 2, 3})


def test_a_given_id_is_used_on_a_fresh_node():
    assert resolve_cluster_id("c1", None, True, 4, {1, 2, 3}) == ("c1", False)
    with pytest.raises(RaftConfigError, match="must not be empty"):
        resolve_cluster_id(" ", None, True, 4, {1})


def test_only_the_sole_bootstrap_voter_generates_one():
    cluster_id, generated = resolve_cluster_id(None, None, True, 1, {1})
    assert generated and len(cluster_id) == 22
    for node_id, voters in ((1, {1, 2, 3}), (2, {1})):
        with pytest.raises(RaftConfigError, match="--cluster-id is needed"):
            resolve_cluster_id(None, None, True, node_id, voters)
    with pytest.raises(RaftConfigError, match="log is not empty"):
        resolve_cluster_id(None, None, False, 1, {1})


def test_the_first_leader_writes_the_cluster_id_in_the_first_voter_assignment():
    log = InMemoryRaftLog()
    node = RaftNode(1, "the-id", {1}, log, RaftConfig(), random.Random(1), 0)
    node.tick(10_000)
    assert node.role is Role.LEADER
    first = log.read(0, 1)[0]
    assert first.payload == VoterAssignment("the-id", (1,), None)
