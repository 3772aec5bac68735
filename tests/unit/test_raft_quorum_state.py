"""The quorum-state file: the design's QuorumStateMessage as JSON, replaced atomically."""

from __future__ import annotations

import json

import pytest

from broker_core.raft import QuorumState, QuorumStateError, read_quorum_state, write_quorum_state
from broker_core.raft.quorum_state import FILE_NAME

STATE = QuorumState(cluster_id="c1", leader_id=2, leader_epoch=7, voted_id=3,
                    applied_offset=41, current_voters=(1, 2, 3), target_voters=(2, 3, 4))


def test_round_trip_through_the_file(tmp_path):
    write_quorum_state(tmp_path, STATE)
    assert read_quorum_state(tmp_path) == STATE
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed into place


def test_file_uses_the_design_field_names(tmp_path):
    write_quorum_state(tmp_path, STATE)
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert doc == {"version": 0, "ClusterId": "c1", "LeaderId": 2, "LeaderEpoch": 7,
                   "VotedId": 3, "AppliedOffset": 41,
                   "CurrentVoters": [{"VoterId": 1}, {"VoterId": 2}, {"VoterId": 3}],
                   "TargetVoters": [{"VoterId": 2}, {"VoterId": 3}, {"VoterId": 4}]}


def test_null_target_voters_round_trip(tmp_path):
    state = QuorumState("c1", -1, 0, -1, -1, (1,), None)
    write_quorum_state(tmp_path, state)
    assert read_quorum_state(tmp_path) == state


def test_a_missing_file_means_a_fresh_node(tmp_path):
    assert read_quorum_state(tmp_path) is None


def test_rewrite_replaces_the_whole_file(tmp_path):
    write_quorum_state(tmp_path, STATE)
    newer = QuorumState("c1", -1, 8, -1, 41, (1, 2, 3))
    write_quorum_state(tmp_path, newer)
    assert read_quorum_state(tmp_path) == newer


@pytest.mark.parametrize("text, problem", [
    ("{", "malformed"),
    ('{"version": 1}', "unsupported version"),
    ('{"version": 0, "ClusterId": "c"}', "malformed"),
    (json.dumps({"version": 0, "ClusterId": "c", "LeaderId": True, "LeaderEpoch": 1,
                 "VotedId": -1, "AppliedOffset": -1, "CurrentVoters": [],
                 "TargetVoters": None}), "LeaderId should be int"),
    (json.dumps({"version": 0, "ClusterId": "c", "LeaderId": 1, "LeaderEpoch": -2,
                 "VotedId": -1, "AppliedOffset": -1, "CurrentVoters": [],
                 "TargetVoters": None}), "negative LeaderEpoch"),
])
def test_a_file_that_cannot_be_trusted_is_an_error_naming_it(tmp_path, text, problem):
    # Starting fresh instead could let the node vote a second time in an epoch.
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(QuorumStateError, match=problem) as info:
        read_quorum_state(tmp_path)
    assert FILE_NAME in str(info.value)
