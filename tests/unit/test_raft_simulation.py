"""Randomised simulations of the quorum with the invariant checker after every step.

Each run draws its cluster size, observers, network faults (loss, duplication, delays that
reorder, symmetric partitions, one-way cuts, flapping links), crashes with restarts, power cuts
in the middle of a step's writes, lost disks (replaced through the reassignment procedure) and
voter reassignments from its seed, runs two simulated seconds of chaos, then heals everything
and checks liveness: a leader is elected and a new entry commits on every node. A failing seed
replays exactly: ``chaotic_simulation(seed)``.
"""

from __future__ import annotations

import dataclasses

import pytest

from broker_core.raft import Effects, RaftNode, Role, VoterAssignment
from broker_core.raft.commit import next_high_watermark
from broker_core.raft.messages import NO_LEADER, AlterVotersResponse
from broker_core.raft.voter_set import VoterSetHistory
from broker_core.wire.errors import ErrorCode
from tests.support.raft_chaos import LIVENESS_BOUND_MS, T, chaotic_simulation, run_chaos_then_heal
from tests.support.raft_invariants import InvariantChecker, InvariantViolation
from tests.support.raft_nodes import CLUSTER, make_node
from tests.support.raft_sim import SIM_CONFIG, Faults, SimDiskLog, Simulation


@pytest.mark.parametrize("seed", range(200))
def test_random_faults_never_break_an_invariant_and_the_healed_quorum_makes_progress(seed):
    sim = chaotic_simulation(seed)
    run_chaos_then_heal(sim)
    assert sim.checker.steps > 0


def test_regression_a_disk_replaced_with_the_first_starts_voters_forked_the_cluster():
    # Found by a sweep: a one-voter cluster grew to (1, 2, 3); node 1 lost its disk, was
    # removed, and was started again with its first start's quorum voters, (1,): alone in its
    # voter set with an empty log, it elected itself in epoch 1 and began a second history (it
    # "became leader of epoch 1 without committed entry"). A replaced disk's node now starts
    # as any node joining a running quorum does: with the current voters.
    sim = chaotic_simulation(11103)
    assert sim.voters == (1,)
    run_chaos_then_heal(sim, chaos_ms=4000.0)
    assert [n for _, n in sim.disks_lost] == [1]


# ---------------------------------------------------------------------- benign schedules


@pytest.mark.parametrize("voters", [(1,), (1, 2, 3), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("seed", range(5))
def test_a_quiet_network_elects_one_leader_quickly_and_commits_every_proposal(voters, seed):
    sim = Simulation(seed, voters=voters, observers=(9,))
    assert sim.run_until(lambda: sim.leader() is not None, 4 * T)
    sim.run_for(2000.0)
    assert {node.epoch for node in sim.live_nodes()} == {1}  # no needless elections
    last = sim.proposals[-1]
    assert sim.run_until(lambda: sim.committed_everywhere(last.offset), 10 * T)
    committed = {e.payload for e in sim.checker.committed}
    assert all(p.payload in committed for p in sim.proposals)


def test_a_crashed_leader_is_replaced_and_its_committed_entries_survive():
    sim = Simulation(3, voters=(1, 2, 3))
    sim.run_until(lambda: sim.leader() is not None and sim.leader().high_watermark > 5, 20 * T)
    old = sim.leader()
    committed = list(sim.checker.committed)
    sim._crash(old.node_id)
    assert sim.run_until(lambda: sim.leader() is not None, 20 * T)
    new = sim.leader()
    assert new.node_id != old.node_id and new.epoch > old.epoch
    assert new.log.read(0, len(committed)) == tuple(committed)


def test_a_leader_cut_off_from_its_majority_resigns_and_follows_the_new_leader_after():
    sim = Simulation(4, voters=(1, 2, 3), propose_every_ms=None)
    sim.run_until(lambda: sim.leader() is not None, 20 * T)
    old = sim.leader()
    sim.groups = {n: (1 if n == old.node_id else 0) for n in sim.ids}
    # The zombie leader: nobody fetches from it, so it gives up within the fetch
    # timeout instead of serving stale reads forever.
    assert sim.run_until(lambda: old.role is not Role.LEADER,
                         SIM_CONFIG.fetch_timeout_ms + SIM_CONFIG.fetch_max_wait_ms + 10)
    assert sim.run_until(lambda: any(n.role is Role.LEADER and n.epoch > old.epoch
                                     for n in sim.live_nodes()), 20 * T)
    sim.groups = {n: 0 for n in sim.ids}
    assert sim.run_until(lambda: sim.leader() is not None
                         and sim.nodes[old.node_id].leader_id == sim.leader().node_id, 40 * T)


def test_an_observer_replicates_without_voting_weight():
    sim = Simulation(5, voters=(1, 2, 3), observers=(7,))
    sim.run_until(lambda: sim.leader() is not None, 20 * T)
    sim.run_for(1000.0)
    observer = sim.nodes[7]
    assert observer.role is Role.OBSERVER and observer.leader_id == sim.leader().node_id
    assert observer.high_watermark > 0


# ---------------------------------------------------------------------- reassignment


def committed_voter_sets(sim: Simulation) -> list[tuple[int, ...]]:
    """The CurrentVoters of the committed assignments, in log order, repeats collapsed."""
    sets: list[tuple[int, ...]] = []
    for entry in sim.checker.committed:
        if isinstance(entry.payload, VoterAssignment):
            voters = tuple(sorted(entry.payload.current_voters))
            if not sets or sets[-1] != voters:
                sets.append(voters)
    return sets


def test_the_documented_reassignment_completes_while_a_client_keeps_proposing():
    # docs/raft.md's example: (1, 2, 3) -> (4, 5, 6) with 1 leading and 4, 5, 6 observing.
    sim = Simulation(2, voters=(1, 2, 3), observers=(4, 5, 6))
    assert sim.run_until(lambda: sim.leader() is not None and sim.leader().high_watermark > 2,
                         20 * T)
    assert sim.leader().node_id == 1
    asked_at = sim.now
    sim.alter_voters((4, 5, 6))

    def done() -> bool:
        return all(n is not None and n.quorum_state().current_voters == (4, 5, 6)
                   and n.quorum_state().target_voters is None for n in sim.nodes.values())

    assert sim.run_until(done, 40 * T)
    assert committed_voter_sets(sim) == [(1, 2, 3), (1, 2, 3, 4), (1, 2, 4), (1, 2, 4, 5),
                                         (1, 4, 5), (1, 4, 5, 6), (4, 5, 6)]
    assert [r.response.error_code for r in sim.alter_replies] == [ErrorCode.NONE]
    # 1 resigned to be removed last; the new leader is one of the target's.
    assert sim.leader().node_id in (4, 5, 6)
    assert {n: sim.nodes[n].role for n in (1, 2, 3)} == dict.fromkeys((1, 2, 3), Role.OBSERVER)

    # The client kept proposing throughout; what committed survived, and commits go on.
    committed = {(e.offset, e.payload) for e in sim.checker.committed}
    during = [p for p in sim.proposals if p.at > asked_at]
    assert len(during) >= 3 and all((p.offset, p.payload) in committed for p in during)
    last = sim.propose_to_leader(b"after")
    assert sim.run_until(lambda: sim.committed_everywhere(last.offset), 20 * T)
    for node in sim.live_nodes():
        held = {(e.offset, e.payload) for e in node.log.read(0, node.log.end_offset())}
        assert committed <= held


def test_random_runs_do_reassign_and_answer_success():
    completed = successes = 0
    for seed in range(20):
        sim = chaotic_simulation(seed)
        run_chaos_then_heal(sim)
        successes += sum(r.response.error_code is ErrorCode.NONE for r in sim.alter_replies)
        assignments = [e.payload for e in sim.checker.committed
                       if isinstance(e.payload, VoterAssignment)]
        completed += sum(a.target_voters is not None and b.target_voters is None
                         and set(a.current_voters) == set(a.target_voters)
                         for a, b in zip(assignments, assignments[1:], strict=False))
    assert successes > 10 and completed > 0


# ---------------------------------------------------------------------- the checker can fail


class DoubleVoter(RaftNode):
    """Broken on purpose: votes for every candidate that asks in its epoch."""

    def _handle_vote_request(self, env, req):
        if req.candidate_epoch > self._epoch:
            self._observe_epoch(req.candidate_epoch, NO_LEADER)
        if req.candidate_epoch == self._epoch and self._role in (Role.UNATTACHED, Role.VOTED):
            self._voted_id = req.candidate_id
            self._reply(env, self._vote_response(ErrorCode.NONE, True))
            return
        super()._handle_vote_request(env, req)


class MinorityCommitter(RaftNode):
    """Broken on purpose: a leader commits what it alone holds."""

    def _maybe_advance_leader_hw(self):
        if self.log.end_offset() > self._high_watermark:
            self._set_high_watermark(self.log.end_offset())


class OlderEpochCommitter(RaftNode):
    """Broken on purpose: commits entries of older epochs on a majority alone, without
    Raft's rule that only an entry of the leader's own epoch commits (figure 8)."""

    def _maybe_advance_leader_hw(self):
        progress = self._rs.leader.progress
        ends = [self.log.end_offset() if v == self.node_id else progress[v].end_offset
                for v in self._voters]
        hw = next_high_watermark(self._high_watermark, ends, epoch_start_offset=-1)
        if hw > self._high_watermark:
            self._set_high_watermark(hw)


class EagerReassigner(RaftNode):
    """Broken on purpose: answers a reassignment "success" as soon as it is appended."""

    def _handle_alter_voters_request(self, env, req):
        super()._handle_alter_voters_request(env, req)
        for alter in self._rs.leader.pending_alters:
            self._reply(alter.envelope, AlterVotersResponse(ErrorCode.NONE, self.node_id,
                                                            self._epoch))
        self._rs.leader.pending_alters.clear()


def first_violation(seeds, **kwargs) -> InvariantViolation | None:
    for seed in seeds:
        try:
            chaotic_simulation(seed, **kwargs).run_for(2000.0)
        except InvariantViolation as e:
            return e
    return None


def test_the_checker_catches_a_node_that_votes_twice_in_an_epoch():
    caught = first_violation(range(30), node_factory=DoubleVoter)
    assert caught is not None and ("voted for" in str(caught) or "leads epoch" in str(caught)
                                   or "without committed entry" in str(caught))


def test_the_checker_catches_a_leader_that_commits_on_a_minority():
    caught = first_violation(range(30), node_factory=MinorityCommitter)
    assert caught is not None and ("committed" in str(caught) or "holds" in str(caught))


def test_the_checker_catches_a_leader_that_commits_entries_of_an_older_epoch():
    # Five voters, many crashes and partitions, one entry per fetch response: the setting in
    # which figure 8's sequence of leaders happens.
    faults = Faults(drop=0.1, max_delay_ms=50.0, partitions_per_s=5.0, partition_ms=(50.0, 400.0),
                    crashes_per_s=6.0, downtime_ms=(20.0, 300.0))
    config = dataclasses.replace(SIM_CONFIG, fetch_max_entries=1)
    caught = None
    for seed in range(300):
        sim = Simulation(seed, voters=(1, 2, 3, 4, 5), faults=faults, config=config,
                         node_factory=OlderEpochCommitter, propose_every_ms=5.0)
        try:
            sim.run_for(3000.0)
        except InvariantViolation as e:
            caught = e
            break
    assert caught is not None and "without committed entry" in str(caught)


def test_the_checker_catches_a_reassignment_answered_before_it_commits():
    caught = first_violation(range(30), node_factory=EagerReassigner)
    assert caught is not None and "not committed" in str(caught)


def test_the_checker_catches_a_driver_that_sends_before_persisting():
    caught = first_violation(range(5), send_before_persist=True)
    assert caught is not None and "before persisting" in str(caught)


def test_sending_before_persisting_then_crashing_loses_epochs_or_votes():
    caught = first_violation(range(30), send_before_persist=True, check_persist_order=False)
    assert caught is not None and "epoch went back" in str(caught)


def test_the_checker_catches_a_committed_entry_that_disappears():
    sim = Simulation(6, voters=(1, 2, 3))
    sim.run_until(lambda: sim.leader() is not None and sim.leader().high_watermark > 3, 20 * T)
    node = sim.leader()
    node.log.truncate_to(1)  # as a buggy truncation would
    with pytest.raises(InvariantViolation, match="dropping committed entry"):
        sim.checker.check(node, Effects(truncated_to=1), sim.now)


def test_the_checker_catches_two_leaders_in_one_epoch():
    sim = Simulation(7, voters=(1, 2, 3), propose_every_ms=None)
    sim.run_until(lambda: sim.leader() is not None, 20 * T)
    leader = sim.leader()
    other = sim.nodes[next(n for n in sim.voters if n != leader.node_id)]
    other._role = Role.LEADER  # forced, as a buggy node would

    with pytest.raises(InvariantViolation, match="already led"):
        sim.checker.check(other, None, sim.now)


def test_the_checker_catches_a_high_watermark_going_back():
    sim = Simulation(8, voters=(1,), propose_every_ms=5.0)
    sim.run_for(100.0)
    node = sim.nodes[1]
    node._high_watermark -= 1
    with pytest.raises(InvariantViolation, match="high watermark went back"):
        sim.checker.check(node, None, sim.now)


# ---------------------------------------------------------------------- disks and links


def test_random_runs_do_cut_power_lose_disks_and_cut_links_one_way_and_flapping():
    counts: dict[str, int] = {}
    lost_entries = 0
    for seed in range(40):
        sim = chaotic_simulation(seed)
        run_chaos_then_heal(sim)
        for kind, number in [("power cuts", len(sim.power_cuts)),
                             ("disks lost", len(sim.disks_lost)),
                             *sim.fault_counts.items()]:
            counts[kind] = counts.get(kind, 0) + number
        lost_entries += sum(log.lost_entries for log in sim.logs.values()
                            if isinstance(log, SimDiskLog))
    assert set(counts) >= {"power cuts", "disks lost", "one_way", "flap"}
    assert min(counts.values()) > 0 and lost_entries > 0


def test_a_power_cut_in_a_leaders_write_loses_only_what_nobody_was_told():
    sim = Simulation(9, voters=(1,), propose_every_ms=None)
    assert sim.run_until(lambda: sim.leader() is not None, 20 * T)
    first = sim.propose_to_leader(b"flushed")
    assert sim.checker.committed[first.offset].payload == b"flushed"
    log = sim.logs[1]
    assert isinstance(log, SimDiskLog)
    sim._power_cut.add(1)
    proposal = sim.propose_to_leader(b"cut")
    assert sim.nodes[1] is None and proposal.offset == first.offset + 1
    assert log.power_cuts == 1 and log.lost_entries == 1  # this seed's cut keeps none of it
    assert log.end_offset() == proposal.offset
    sim.heal()
    assert sim.run_until(lambda: sim.leader() is not None, 20 * T)
    # The single voter counted the entry as committed in memory, but the step never finished:
    # nothing of it was sent or applied, and the entry is gone with the unflushed write.
    assert all(e.payload != b"cut" for e in sim.checker.committed)
    assert log.read(first.offset, 1)[0].payload == b"flushed"
    last = sim.propose_to_leader(b"after")
    assert sim.run_until(lambda: sim.committed_everywhere(last.offset), 20 * T)


def test_a_leader_nobody_hears_is_replaced_and_one_that_hears_nobody_resigns():
    # One way: the leader hears the others but they do not hear it.
    sim = Simulation(10, voters=(1, 2, 3), propose_every_ms=None)
    assert sim.run_until(lambda: sim.leader() is not None, 20 * T)
    old = sim.leader()
    others = [n for n in sim.ids if n != old.node_id]
    muted = tuple((old.node_id, n) for n in others)
    sim._cut(muted, 1)
    assert sim.run_until(lambda: any(sim.nodes[n].role is Role.LEADER for n in others), 40 * T)
    assert sim.run_until(lambda: old.role is not Role.LEADER, 40 * T)  # it hears the new epoch
    sim._cut(muted, -1)
    assert sim.run_until(lambda: sim.leader() is not None
                         and old.leader_id == sim.leader().node_id, 40 * T)
    # The other way: the leader's followers hear it, but it hears none of them.
    leader = sim.leader()
    deaf = tuple((n, leader.node_id) for n in sim.ids if n != leader.node_id)
    sim._cut(deaf, 1)
    assert sim.run_until(lambda: leader.role is not Role.LEADER,
                         SIM_CONFIG.fetch_timeout_ms + SIM_CONFIG.fetch_max_wait_ms + 10)


def test_a_flapping_link_to_the_leader_delays_but_loses_nothing():
    sim = Simulation(11, voters=(1, 2, 3), faults=Faults(flaps_per_s=20.0, flap_ms=(1.0, 20.0)))
    sim.run_for(3000.0)
    assert sim.fault_counts["flap"] > 20
    sim.heal()
    assert sim.run_until(lambda: sim.leader() is not None, LIVENESS_BOUND_MS)
    last = sim.propose_to_leader(b"last")
    assert sim.run_until(lambda: sim.committed_everywhere(last.offset), LIVENESS_BOUND_MS)
    committed = {e.payload for e in sim.checker.committed}
    assert len(committed) > 50


def test_a_lost_disk_is_removed_then_its_node_rejoins_empty_and_is_added_back():
    sim = Simulation(12, voters=(1, 2, 3), propose_every_ms=20.0)
    assert sim.run_until(lambda: sim.leader() is not None and sim.leader().high_watermark > 5,
                         20 * T)
    leader = sim.leader().node_id
    lost = next(n for n in sim.ids if n != leader)
    held = len(sim.checker.committed)
    assert sim.lose_disk(lost)
    assert not sim.lose_disk(leader)  # one replacement at a time
    sim.heal()  # its disk stays lost: it stays down until its removal commits
    assert sim.nodes[lost] is None
    assert sim.run_until(lambda: sim.replacing.get(lost) == "adding", 40 * T)
    # Its removal committed before it started again, and it started empty, as an observer.
    assert lost not in sim.committed_assignment().current_voters
    node = sim.nodes[lost]
    assert node is not None and node.role is Role.OBSERVER and node.epoch == 0
    assert sim.run_until(lambda: not sim.replacing, 40 * T)
    assert lost in sim.committed_assignment().current_voters
    sets = committed_voter_sets(sim)
    others = tuple(sorted(set(sim.voters) - {lost}))
    assert sets == [(1, 2, 3), others, (1, 2, 3)]
    last = sim.propose_to_leader(b"after")
    assert sim.run_until(lambda: sim.committed_everywhere(last.offset), 40 * T)
    assert sim.nodes[lost].log.read(0, held) == tuple(sim.checker.committed[:held])


# Three voters, frequent crashes and partitions, and a disk lost every ~300 ms.
DISK_LOSS_FAULTS = Faults(drop=0.05, max_delay_ms=20.0, partitions_per_s=3.0, crashes_per_s=2.0,
                          downtime_ms=(20.0, 300.0), disk_losses_per_s=3.0)


def disk_loss_simulation(seed: int, remove_lost_disks: bool) -> Simulation:
    return Simulation(seed, voters=(1, 2, 3), faults=DISK_LOSS_FAULTS, propose_every_ms=5.0,
                      remove_lost_disks=remove_lost_disks)


def test_a_lost_disk_restarted_without_the_removal_loses_committed_entries():
    # The hazard the procedure avoids: an empty node voting as the voter it was, whose old
    # disk held entries it acknowledged, lets a node lacking them win.
    caught = None
    for seed in range(10):
        try:
            disk_loss_simulation(seed, remove_lost_disks=False).run_for(2000.0)
        except InvariantViolation as e:
            caught = e
            break
    assert caught is not None and "without committed entry" in str(caught)


def test_with_the_removal_first_the_same_disk_losses_keep_every_invariant():
    lost = 0
    for seed in range(10):
        sim = disk_loss_simulation(seed, remove_lost_disks=True)
        run_chaos_then_heal(sim)
        lost += len(sim.disks_lost)
    assert lost >= 5  # the disks were lost (one replacement at a time)


def test_the_checker_catches_a_driver_that_sends_before_flushing_the_log():
    caught = first_violation(range(10), flush_after_send=True)
    assert caught is not None and "committed entry" in str(caught)


# ---------------------------------------------------------------------- one voter change at a time


class _LaxVoterHistory(VoterSetHistory):
    """Broken on purpose: accepts a voter change while another is uncommitted."""

    def check_change(self, proposed, leader_id):
        pending, self._pending = self._pending, []
        try:
            super().check_change(proposed, leader_id)
        finally:
            self._pending = pending


class TwoChangesInFlight(RaftNode):
    """Broken on purpose: its leader appends a voter change before the previous one commits."""

    @property
    def _history(self):
        return self.__dict__["_lax_history"]

    @_history.setter
    def _history(self, history):
        history.__class__ = _LaxVoterHistory
        self.__dict__["_lax_history"] = history


def test_the_checker_catches_two_voter_changes_in_flight():
    caught = first_violation(range(20), node_factory=TwoChangesInFlight)
    assert caught is not None and "two uncommitted voter changes" in str(caught)


def test_the_checker_catches_a_voter_change_of_two_members():
    checker = InvariantChecker()
    node = make_node(entries=[(1, VoterAssignment(CLUSTER, (1, 2, 3))), (1, b"x"),
                              (1, VoterAssignment(CLUSTER, (1,)))])
    with pytest.raises(InvariantViolation, match="uncommitted voter change .* more than one"):
        checker.check(node, None, 0.0)
    committed = InvariantChecker()
    node._high_watermark = 3
    with pytest.raises(InvariantViolation, match="committed voter set .* more than one"):
        committed.check(node, None, 0.0)
