"""``BootstrapRunner`` on a ``task.Clock`` with a fake DiscoverBrokers sender: it asks when the
machine says, feeds answers and peers' requests back, keeps one timer at the machine's
deadline, starts the node once, and fails with the machine's reason. And step 1's input,
``persisted_view``, from a quorum-state file and a log."""

from __future__ import annotations

from twisted.internet import defer, task

from broker_core.raft.bootstrap import BootstrapMachine, Phase, StartNode
from broker_core.raft.bootstrap_runner import BootstrapFailed, BootstrapRunner, persisted_view
from broker_core.raft.discovery import Gossip, NodeEndpoint, QuorumView
from broker_core.raft.entries import LeaderChange, LogEntry, VoterAssignment
from broker_core.raft.log import InMemoryRaftLog
from broker_core.raft.quorum_state import QuorumState, write_quorum_state

SEED = ("seed", 9000)


def ep(n: int, boot: int = 0) -> NodeEndpoint:
    return NodeEndpoint(n, f"h{n}", 9000 + n, boot)


class FakeSender:
    """Records every DiscoverBrokers; the test answers or fails them."""

    def __init__(self) -> None:
        self.asked: list[tuple[tuple[str, int], Gossip, defer.Deferred]] = []

    def __call__(self, server: tuple[str, int], gossip: Gossip) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.asked.append((server, gossip, d))
        return d


def runner(clock: task.Clock, me: int = 1, voters=None, servers=(SEED,), cluster_id="c",
           persisted=None, started=None, phases=None):
    machine = BootstrapMachine(ep(me, 10), voters if voters is not None else {},
                               list(servers), cluster_id, persisted, clock.seconds() * 1000,
                               interval_ms=125, discovery_timeout_ms=1000)
    sender = FakeSender()
    starts = started if started is not None else []
    r = BootstrapRunner(machine, clock, sender, starts.append,
                        None if phases is None else phases.append)
    return r, sender, starts


def test_asks_at_once_then_every_interval_on_the_clock_and_starts_on_an_answer():
    clock = task.Clock()
    phases: list[Phase] = []
    r, sender, starts = runner(clock, me=7, phases=phases)
    d = r.run()
    assert [s for s, _, _ in sender.asked] == [SEED] and phases == [Phase.DISCOVERING]
    assert sender.asked[0][1].node == ep(7, 10)  # it tells its own endpoint
    clock.advance(0.124)
    assert len(sender.asked) == 1
    clock.advance(0.001)
    assert len(sender.asked) == 2
    sender.asked[0][2].errback(defer.TimeoutError())  # an unanswered request is dropped
    sender.asked[1][2].callback(Gossip(ep(1, 5), (ep(2, 6),), QuorumView("c", 1, 3, 4, (1, 2))))
    assert starts == [StartNode("c", {1: ep(1, 5), 2: ep(2, 6)}, as_voter=False, leader_id=1,
                                voter_ids=(1, 2))]
    assert phases == [Phase.DISCOVERING, Phase.STARTED]
    assert d.called and d.result == starts[0]
    assert clock.getDelayedCalls() == []  # no timer left
    clock.advance(10)
    assert len(sender.asked) == 2  # and nothing asked after the start


def test_a_peers_request_feeds_the_machine_and_the_timer_follows_the_deadline():
    clock = task.Clock()
    phases: list[Phase] = []
    r, sender, starts = runner(clock, me=1, voters={1: ep(1), 2: None, 3: None}, phases=phases)
    d = r.run()
    (call,) = clock.getDelayedCalls()
    assert call.getTime() == 0.125  # (times in binary fractions: the clock adds exactly)
    clock.pump([0.125] * 7)
    assert len(sender.asked) == 8 and phases == [Phase.DISCOVERING]
    clock.advance(0.125)  # the discovery timeout: step 5, waiting for a majority
    assert phases == [Phase.DISCOVERING, Phase.WAITING_FOR_VOTERS] and not d.called
    # What it tells now names it a voter of the configured set (step 5.1).
    assert sender.asked[-1][1].view.voter_ids == (1, 2, 3)
    # Node 2 asks us (an inbound DiscoverBrokers): a majority is known, the vote begins.
    r.gossip_received(Gossip(ep(2, 20), (), QuorumView("c", voter_ids=(1, 2, 3))))
    (start,) = starts
    assert start.voter_ids == (1, 2, 3) and start.as_voter and set(start.voters) == {1, 2}
    assert d.result is start and clock.getDelayedCalls() == []
    # Answers still in flight after the start are ignored.
    sender.asked[-1][2].callback(Gossip(ep(3, 30), (), QuorumView("c", voter_ids=(1, 2, 3))))
    assert len(starts) == 1


def test_a_machine_that_cannot_start_fails_the_deferred_with_its_reason():
    clock = task.Clock()
    r, sender, starts = runner(clock, me=4, voters={1: None}, servers=())
    d = r.run()
    failure = []
    d.addErrback(failure.append)
    (f,) = failure
    assert f.check(BootstrapFailed) and "not in quorum.voters" in str(f.value)
    assert starts == [] and sender.asked == [] and clock.getDelayedCalls() == []


def test_a_start_that_raises_fails_the_deferred_and_stop_gives_up():
    clock = task.Clock()

    class Boom(list):
        def append(self, item):
            raise OSError("disk gone")

    r, _, _ = runner(clock, me=1, voters={1: ep(1)}, servers=(), started=Boom())
    failure: list = []
    r.run().addErrback(failure.append)
    assert failure[0].check(OSError)

    r, sender, starts = runner(clock, me=7)
    d = r.run()
    r.stop()
    failure = []
    d.addErrback(failure.append)
    assert failure[0].check(BootstrapFailed) and clock.getDelayedCalls() == []
    sender.asked[0][2].callback(Gossip(ep(1, 5), (), QuorumView("c", 1, 3, 4, (1,))))
    assert starts == []


def test_an_answer_delivered_while_asking_is_fed_after_the_current_input():
    clock = task.Clock()
    starts: list[StartNode] = []
    machine = BootstrapMachine(ep(7, 10), {}, [SEED, ("other", 1)], "c", None, 0,
                               interval_ms=100, discovery_timeout_ms=1000)
    seen: list[int] = []

    def answer_at_once(server, gossip):
        seen.append(len(starts))
        return defer.succeed(Gossip(ep(1, 5), (), QuorumView("c", 1, 3, 4, (1,))))

    BootstrapRunner(machine, clock, answer_at_once, starts.append).run()
    # Both servers were asked before the first answer started the node, and it started once.
    assert seen == [0, 0] and len(starts) == 1


def test_persisted_view_reads_the_file_and_the_log_beyond_its_applied_offset(tmp_path):
    log = InMemoryRaftLog()
    assert persisted_view(tmp_path, log) is None  # a fresh node
    write_quorum_state(tmp_path, QuorumState("c", -1, 0, -1, -1, (1, 2, 3)))
    assert persisted_view(tmp_path, log) == QuorumView("c")  # it never took part in a quorum
    log.append([LogEntry(0, 1, VoterAssignment("c", (1, 2, 3), None)),
                LogEntry(1, 1, LeaderChange(1, (1, 2, 3), (1, 2))),
                LogEntry(2, 2, VoterAssignment("c", (1, 2, 3, 4), None))])
    write_quorum_state(tmp_path, QuorumState("c", 2, 2, 2, 0, (1, 2, 3)))
    # The file's voters are as of offset 0; the uncommitted assignment at 2 is the latest.
    assert persisted_view(tmp_path, log) == QuorumView("c", 2, 2, 2, (1, 2, 3, 4))
