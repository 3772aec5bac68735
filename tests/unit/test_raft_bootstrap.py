"""The six-step start procedure (``bootstrap.BootstrapMachine``) on a clock: restore,
discover, fall back to quorum.voters, wait for a majority, join an existing quorum."""

from __future__ import annotations

import pytest

from broker_core.raft.bootstrap import (
    TRANSITIONS,
    AskServers,
    BootstrapMachine,
    Phase,
    StartNode,
)
from broker_core.raft.discovery import Gossip, NodeEndpoint, QuorumView

SERVERS = [("seed", 9000)]


def ep(n: int, boot: int = 0) -> NodeEndpoint:
    return NodeEndpoint(n, f"h{n}", 9000 + n, boot)


def machine(node: int = 1, voters=(), servers=SERVERS, cluster_id=None, persisted=None,
            now: float = 0.0) -> BootstrapMachine:
    return BootstrapMachine(ep(node, 10), {v: ep(v) for v in voters}, list(servers),
                            cluster_id, persisted, now, interval_ms=100,
                            discovery_timeout_ms=1000, new_cluster_id=lambda: "generated")


def run_until(m: BootstrapMachine, end: float) -> list:
    """Tick at every deadline up to ``end``; the actions in order."""
    actions = []
    while (d := m.next_deadline()) is not None and d <= end:
        actions += m.tick(d)
    return actions


def test_step2_a_persisted_quorum_with_known_endpoints_starts_at_once():
    m = machine(node=2, voters=(1, 2, 3), persisted=QuorumView("c", 1, 4, 10, (1, 2, 3)))
    (start,) = m.take_actions()
    assert m.phase is Phase.STARTED and start == StartNode(
        "c", {1: ep(1), 2: ep(2, 10), 3: ep(3)}, as_voter=True, leader_id=1, voter_ids=(1, 2, 3))
    assert m.next_deadline() is None


def test_step2_without_endpoints_discovers_them_first():
    m = machine(node=2, voters=(), persisted=QuorumView("c", 1, 4, 10, (1, 2, 3)))
    assert m.take_actions() == [AskServers(tuple(SERVERS))] and m.phase is Phase.DISCOVERING
    gossip = Gossip(ep(1, 5), (ep(3, 6),), QuorumView("c", 1, 4, 10, (1, 2, 3)))
    (start,) = m.gossip_received(gossip, 50)
    assert start.voters == {1: ep(1, 5), 2: ep(2, 10), 3: ep(3, 6)} and start.as_voter


def test_step3_asks_every_interval_until_the_quorum_is_found():
    m = machine(node=7, voters=(1, 2, 3))
    assert m.take_actions() == [AskServers(tuple(SERVERS))]
    assert run_until(m, 350) == [AskServers(tuple(SERVERS))] * 3
    # A view without every voter's endpoint is not enough (step 3.1).
    assert m.gossip_received(Gossip(ep(1, 5), (), QuorumView("c", 1, 3, 8, (1, 4))), 360) == []
    (start,) = m.gossip_received(Gossip(ep(4, 5), (), QuorumView("c", 1, 3, 8, (1, 4))), 370)
    assert start == StartNode("c", {1: ep(1, 5), 4: ep(4, 5)}, as_voter=False, leader_id=1,
                              voter_ids=(1, 4))
    assert m.next_deadline() is None and m.gossip_received(
        Gossip(ep(9, 9), (), QuorumView("c", 9, 9, 9, (9,))), 400) == []


def test_step5_an_observer_never_makes_a_quorum_up_and_keeps_asking():
    m = machine(node=7, voters=(1, 2, 3))
    m.take_actions()
    actions = run_until(m, 3000)
    assert m.phase is Phase.DISCOVERING and actions and all(
        isinstance(a, AskServers) for a in actions)


def test_step5_and_6_a_configured_voter_waits_for_a_majority_of_endpoints():
    m = machine(node=1, voters=(1, 2, 3, 4, 5), cluster_id="c")
    m.take_actions()
    run_until(m, 999)
    assert m.phase is Phase.DISCOVERING
    # Five configured voters: the endpoints from quorum.voters count (itself included).
    actions = run_until(m, 1000)
    assert m.phase is Phase.STARTED
    (start,) = [a for a in actions if isinstance(a, StartNode)]
    assert start.as_voter and set(start.voters) == {1, 2, 3, 4, 5}


def test_step6_with_endpoints_learned_by_gossip_only():
    # Voters configured by id with no endpoints of the others: gossip supplies them.
    m = BootstrapMachine(ep(1, 10), {1: None, 2: None, 3: None}, SERVERS, "c", None, 0,
                         interval_ms=100, discovery_timeout_ms=1000)
    m.take_actions()
    run_until(m, 1000)
    assert m.phase is Phase.WAITING_FOR_VOTERS and m.gossip().view.voter_ids == (1, 2, 3)
    (start,) = m.gossip_received(Gossip(ep(2, 20), (), QuorumView("c", -1, -1, -1, (1, 2, 3))),
                                 1050)
    assert start == StartNode("c", {1: ep(1, 10), 2: ep(2, 20)}, as_voter=True, leader_id=-1,
                             voter_ids=(1, 2, 3))


def test_the_sole_configured_voter_generates_the_cluster_id_others_wait_for_one():
    m = machine(node=1, voters=(1,))
    m.take_actions()
    (start,) = [a for a in run_until(m, 1000) if isinstance(a, StartNode)]
    assert start.cluster_id == "generated" and start.voters == {1: ep(1, 10)}
    m = machine(node=1, voters=(1, 2, 3))
    m.take_actions()
    run_until(m, 1500)
    assert m.phase is Phase.WAITING_FOR_VOTERS  # majority known, but no cluster id yet
    (start,) = m.gossip_received(Gossip(ep(2, 3), (), QuorumView("c", -1, -1, -1, (1, 2, 3))),
                                 1600)
    assert start.cluster_id == "c" and start.as_voter


def test_an_existing_quorum_found_while_waiting_is_joined_not_bootstrapped_again():
    m = machine(node=3, voters=(1, 2, 3), cluster_id="c")
    m.take_actions()
    m.directory.nodes.clear()  # it knows nobody's endpoint yet
    run_until(m, 1000)
    assert m.phase is Phase.WAITING_FOR_VOTERS
    (start,) = m.gossip_received(
        Gossip(ep(5, 1), (ep(6, 1),), QuorumView("c", 5, 7, 40, (5, 6))), 1100)
    assert start == StartNode("c", {5: ep(5, 1), 6: ep(6, 1)}, as_voter=False, leader_id=5,
                              voter_ids=(5, 6))


def test_without_bootstrap_servers_step5_is_taken_at_once():
    m = machine(node=1, voters=(1, 2, 3), servers=(), cluster_id="c")
    (start,) = m.take_actions()
    assert start.as_voter and m.phase is Phase.STARTED
    m = machine(node=4, voters=(1, 2, 3), servers=())
    assert m.take_actions() == [] and m.phase is Phase.FAILED
    assert "not in quorum.voters" in (m.failure or "")


def test_another_clusters_answer_is_ignored_with_a_warning():
    m = machine(node=7, voters=(1, 2, 3), cluster_id="c")
    m.take_actions()
    assert m.gossip_received(Gossip(ep(1, 1), (), QuorumView("x", 1, 1, 1, (1,))), 10) == []
    assert m.phase is Phase.DISCOVERING and "cluster 'x'" in (m.warning or "")
    assert 1 not in m.directory.nodes or m.directory.nodes[1] == ep(1)


def test_started_and_failed_are_final():
    assert not any(src in (Phase.STARTED, Phase.FAILED) for src, _ in TRANSITIONS)


def test_a_persisted_id_that_differs_from_the_given_one_is_refused():
    from broker_core.raft.discovery import ClusterMismatch

    with pytest.raises(ClusterMismatch):
        machine(cluster_id="given", persisted=QuorumView("persisted", 1, 1, 1, (1,)))


def test_a_node_that_knows_its_quorum_never_falls_back_to_quorum_voters():
    # Persisted epoch 4 with voters 1, 2, 3 whose endpoints are unknown (id-only voters): it
    # waits for them instead of making up a quorum of the configured ones.
    m = BootstrapMachine(ep(1, 10), {1: None, 2: None, 3: None}, SERVERS, "c",
                         QuorumView("c", 2, 4, 7, (1, 2, 3)), 0, interval_ms=100,
                         discovery_timeout_ms=1000)
    m.take_actions()
    assert run_until(m, 5000) and m.phase is Phase.DISCOVERING
    assert m.gossip().view == QuorumView("c", 2, 4, 7, (1, 2, 3))
    m.gossip_received(Gossip(ep(2, 20), (), QuorumView("c", 2, 4, 7, (1, 2, 3))), 5010)
    assert m.phase is Phase.DISCOVERING  # a majority is not enough for a known quorum
    (start,) = m.gossip_received(Gossip(ep(3, 30), (), QuorumView("c", 2, 4, 7, (1, 2, 3))),
                                 5020)
    assert start.voter_ids == (1, 2, 3) and start.as_voter and start.leader_id == 2
    # Without bootstrap servers there is nobody to learn them from.
    m = BootstrapMachine(ep(1, 10), {1: None, 2: None, 3: None}, [], "c",
                         QuorumView("c", 2, 4, 7, (1, 2, 3)), 0)
    assert m.take_actions() == [] and m.phase is Phase.FAILED and "no known endpoints" in (
        m.failure or "")


def test_an_observer_outside_quorum_voters_observes_them_once_it_knows_their_endpoints():
    m = machine(node=4, voters=(1, 2, 3), servers=(), cluster_id="c")
    (start,) = m.take_actions()
    assert start == StartNode("c", {1: ep(1), 2: ep(2), 3: ep(3)}, as_voter=False,
                              leader_id=-1, voter_ids=(1, 2, 3))
    m = machine(node=4, voters=(1, 2, 3), cluster_id="c")
    m.take_actions()
    (start,) = [a for a in run_until(m, 1000) if isinstance(a, StartNode)]
    assert not start.as_voter and start.voter_ids == (1, 2, 3)


def test_only_the_sole_voter_marks_its_cluster_id_generated():
    m = machine(node=1, voters=(1,), servers=())
    (start,) = m.take_actions()
    assert start.cluster_id == "generated" and m.cluster_id_generated
    m = machine(node=1, voters=(1,), servers=(), cluster_id="c")
    m.take_actions()
    assert not m.cluster_id_generated
