"""The shared leader election (broker_core/leader_election.py) on the in-memory store: the cases
the controller and the consumer coordinator both rely on, and the hostile ones (an unreadable
seat, an epoch moved under a standing broker, a start-up that fails)."""

from __future__ import annotations

from twisted.internet import defer, task
from twisted.logger import Logger, LogLevel

from broker_core import metadata_paths as paths
from broker_core.leader_election import (
    ELECTION_ATTEMPTS,
    LeaderElection,
    Role,
    Seat,
    SerialSteps,
)
from broker_core.metadata import ConnectionLost, SessionState
from coordinator.elector import coordinator_election
from tests.support.memory_store import HeldMultiStore, MemoryStore

SEAT = Seat(title="controller", path=paths.CONTROLLER, epoch_path=paths.CONTROLLER_EPOCH,
            registration=paths.ControllerRegistration,
            owner_of=lambda data: paths.ControllerRegistration.from_bytes(data).broker_id)


def holder(broker: int) -> bytes:
    return paths.ControllerRegistration(broker, 0).to_bytes()


class Recorder:
    """What the election told its user, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def elected(self, epoch: int, version: int) -> None:
        self.calls.append(("elected", epoch, version))

    async def resigned(self) -> None:
        self.calls.append(("resigned",))

    def suspended(self, paused: bool) -> None:
        self.calls.append(("suspended", paused))

    def lost(self) -> None:
        self.calls.append(("lost",))


def make(store: MemoryStore | None = None, broker: int = 1, **kwargs):
    store = MemoryStore() if store is None else store
    events: list[dict] = []
    log = Logger(namespace="test.election", observer=events.append)
    user = Recorder()
    clock = task.Clock()
    clock.advance(42)
    election = LeaderElection(broker, store, SEAT, SerialSteps(log), on_elected=user.elected,
                              on_resigned=user.resigned, on_suspended=user.suspended,
                              on_lost=user.lost, clock=clock, log=log, **kwargs)
    return store, election, user, events


def epoch_of(store: MemoryStore) -> tuple[int, int]:
    data, version = store.nodes[paths.CONTROLLER_EPOCH]
    return int(data), version


def test_a_vacant_seat_is_taken_at_start_with_a_fresh_epoch():
    store, election, user, _ = make()
    election.start()
    assert election.role is Role.LEADER and election.leader_id == 1
    # The epoch node was created at 0, then bumped together with the seat's creation.
    assert epoch_of(store) == (1, 1)
    assert (election.epoch, election.epoch_version) == (1, 1)
    assert user.calls == [("elected", 1, 1)]
    reg = paths.ControllerRegistration.from_bytes(store.nodes[paths.CONTROLLER][0])
    assert reg == paths.ControllerRegistration(1, 42_000)  # stamped by the injected clock
    assert store.exists(paths.CONTROLLER).result.ephemeral_owner == store.session_id


def test_a_held_seat_is_followed_and_stood_for_when_it_goes():
    store, election, user, _ = make()
    store.create(paths.CONTROLLER_EPOCH, b"7")
    store.create(paths.CONTROLLER, holder(2))
    election.start()
    assert election.role is Role.FOLLOWER and election.leader_id == 2 and user.calls == []
    store.delete(paths.CONTROLLER)
    assert election.active and epoch_of(store) == (8, 1)
    assert user.calls == [("elected", 8, 1)]


class BumpingStore(MemoryStore):
    """Another broker bumps the epoch just before each of our next ``times`` multis
    (test-only: ``times``)."""

    times = 0

    def multi(self, ops):
        if self.times and any(getattr(op, "path", None) == paths.CONTROLLER for op in ops):
            self.times -= 1
            data, version = self.nodes[paths.CONTROLLER_EPOCH]
            self.nodes[paths.CONTROLLER_EPOCH] = (str(int(data) + 1).encode(), version + 1)
        return super().multi(ops)


def test_an_epoch_moved_between_read_and_write_is_read_again():
    store = BumpingStore()
    store.create(paths.CONTROLLER_EPOCH, b"3")
    store.times = 2
    store, election, user, _ = make(store)
    election.start()
    # Two conflicting bumps (3 -> 4 -> 5), then ours on top of the last.
    assert election.active and epoch_of(store) == (6, 3)
    assert user.calls == [("elected", 6, 3)]


def test_a_broker_that_keeps_losing_the_epoch_race_gives_up_until_the_seat_changes():
    store = BumpingStore()
    store.create(paths.CONTROLLER_EPOCH, b"0")
    store.times = ELECTION_ATTEMPTS
    store, election, user, _ = make(store)
    election.start()
    assert not election.active and paths.CONTROLLER not in store.nodes and user.calls == []
    # The next change of the seat (here: a holder that goes) makes it stand again.
    store.create(paths.CONTROLLER, holder(2))
    store.delete(paths.CONTROLLER)
    assert election.active


def test_another_broker_winning_the_seat_first_is_not_retried():
    store, election, user, _ = make()
    store.create(paths.CONTROLLER_EPOCH, b"0")
    real = store.multi

    def multi(ops):
        # Broker 2 takes the seat (without bumping the epoch) just before our multi.
        if paths.CONTROLLER not in store.nodes:
            store.nodes[paths.CONTROLLER] = (holder(2), 0)
        return real(ops)

    store.multi = multi
    election.start()
    assert not election.active and user.calls == [] and epoch_of(store) == (0, 0)


def test_a_seat_naming_another_broker_deposes_the_leader():
    store, election, user, _ = make()
    election.start()
    store.set(paths.CONTROLLER, holder(2))
    assert election.role is Role.FOLLOWER and election.leader_id == 2
    assert user.calls[-1] == ("resigned",)


def test_an_unreadable_seat_is_logged_and_changes_nothing():
    store, election, user, events = make()
    election.start()
    store.set(paths.CONTROLLER, b"\xff not json")
    assert election.active and election.leader_id == 1 and user.calls == [("elected", 1, 1)]
    assert any(e["log_level"] is LogLevel.error for e in events)


def test_a_suspended_session_pauses_and_stands_only_when_connected_again():
    store, election, user, _ = make()
    store.create(paths.CONTROLLER, holder(2))
    election.start()
    store.state(SessionState.SUSPENDED)
    assert election.suspended and user.calls == [("suspended", True)]
    store.delete(paths.CONTROLLER)  # the holder went while we could not act
    assert not election.active and paths.CONTROLLER not in store.nodes
    store.state(SessionState.CONNECTED)
    assert not election.suspended and election.active
    assert user.calls == [("suspended", True), ("suspended", False), ("elected", 1, 1)]


def test_connected_again_with_the_seat_held_does_not_stand():
    store, election, user, _ = make()
    store.create(paths.CONTROLLER, holder(2))
    election.start()
    store.state(SessionState.SUSPENDED)
    before = store.multis
    store.state(SessionState.CONNECTED)
    assert not election.active and store.multis == before  # read the seat, wrote nothing


def test_a_lost_session_resigns_after_the_user_drops_what_it_held():
    store, election, user, _ = make()
    election.start()
    store.state(SessionState.SUSPENDED)
    del store.nodes[paths.CONTROLLER]  # the ephemeral seat went with the session
    store.state(SessionState.LOST)
    assert not election.active and not election.suspended
    assert user.calls[1:] == [("suspended", True), ("lost",), ("suspended", False),
                              ("resigned",)]
    # A new session: the seat is vacant, so the broker stands again, with a newer epoch.
    store.state(SessionState.CONNECTED)
    assert election.active and election.epoch == 2


def test_a_fenced_off_leader_resigns_and_vacates_its_seat_so_an_election_runs():
    store, election, user, _ = make()
    election.start()
    data, version = store.nodes[paths.CONTROLLER_EPOCH]
    store.nodes[paths.CONTROLLER_EPOCH] = (b"9", version + 1)  # someone moved the epoch on
    election.resign_soon()
    # Resigned, vacated the seat, and (synchronous store) won the election that followed.
    assert user.calls == [("elected", 1, 1), ("resigned",), ("elected", 10, 3)]
    assert election.active and epoch_of(store) == (10, 3)


def test_a_fenced_off_broker_that_no_longer_leads_leaves_the_seat_alone():
    store, election, user, _ = make()
    store.create(paths.CONTROLLER, holder(2))
    election.start()
    election.resign_soon()
    assert paths.ControllerRegistration.from_bytes(store.nodes[paths.CONTROLLER][0]).broker_id == 2
    assert user.calls == []


def test_stop_resigns_vacates_the_seat_and_stands_no_more():
    store, election, user, _ = make()
    election.start()
    defer.Deferred.fromCoroutine(election.stop())
    assert not election.active and paths.CONTROLLER not in store.nodes
    assert user.calls == [("elected", 1, 1), ("resigned",)]
    store.state(SessionState.CONNECTED)
    store.create(paths.CONTROLLER, holder(2))
    store.delete(paths.CONTROLLER)
    assert not election.active and store.watches == []


def test_a_broker_that_may_not_stand_does_not():
    allowed = [False]
    store, election, user, _ = make(may_stand=lambda: allowed[0])
    election.start()
    assert not election.active and paths.CONTROLLER not in store.nodes
    allowed[0] = True
    election.elect_soon()
    assert election.active


def test_steps_never_interleave_and_store_errors_are_warnings():
    store, election, user, events = make()
    gate: defer.Deferred = defer.Deferred()

    async def slow_start(epoch: int, version: int) -> None:
        user.calls.append(("elected", epoch, version))
        await gate

    election.on_elected = slow_start
    election.start()
    store.set(paths.CONTROLLER, holder(2))  # deposed while still starting up
    assert user.calls == [("elected", 1, 1)]  # the resignation waits for the start-up
    gate.callback(None)
    assert user.calls == [("elected", 1, 1), ("resigned",)] and not election.active

    async def unreachable() -> None:
        raise ConnectionLost("no quorum leader")

    election.steps.submit("probe", unreachable)
    assert [e["log_level"] for e in events if e.get("step") == "probe"] == [LogLevel.warn]


def test_the_coordinators_failed_start_up_resigns_and_vacates_the_seat():
    store = MemoryStore()
    calls: list[str] = []
    attempts = [0]

    async def start_up(epoch: int, version: int) -> None:
        attempts[0] += 1
        if attempts[0] == 1:
            raise RuntimeError("could not load the groups")
        calls.append(f"started {epoch}")

    async def resigned() -> None:
        calls.append("resigned")

    election = coordinator_election(1, store, 0, on_elected=start_up, on_resigned=resigned)
    election.start()
    # The failed start-up gave the seat up; its vacancy made the broker stand again at once.
    assert calls == ["resigned", "started 2"] and election.active


class AnswerLostStore(MemoryStore):
    """Applies the first claim of the seat but loses its answer (a ZooKeeper connection loss,
    a quorum leader change): the seat names the broker, which was never told it won."""

    lose_claim = True

    def multi(self, ops):
        d = super().multi(ops)
        if self.lose_claim and any(getattr(op, "path", None) == paths.CONTROLLER for op in ops):
            self.lose_claim = False

            def lost(_):
                raise ConnectionLost("the answer was lost")
            d.addCallback(lost)
        return d


def test_a_claim_applied_but_unanswered_is_given_up_and_won_again():
    store, election, user, _ = make(AnswerLostStore())
    election.start()
    # The first claim applied (epoch 1) and its answer was lost: the seat named this broker
    # while it did not lead, so it gave the seat up and the next election won epoch 2.
    assert election.role is Role.LEADER and election.leader_id == 1
    assert user.calls == [("elected", 2, 2)] and epoch_of(store) == (2, 2)
    assert paths.ControllerRegistration.from_bytes(store.nodes[paths.CONTROLLER][0]).broker_id == 1


def test_a_seat_of_this_broker_it_does_not_hold_is_not_given_up_while_it_leads():
    store, election, user, _ = make()
    election.start()
    assert election.role is Role.LEADER
    election._on_seat(holder(1), store.exists(paths.CONTROLLER).result)  # a watch delivery
    assert election.role is Role.LEADER and store.exists(paths.CONTROLLER).result is not None
    assert user.calls == [("elected", 1, 1)]


def test_stop_during_an_election_under_way_vacates_the_seat_that_election_wins():
    store = HeldMultiStore()
    store, election, user, _ = make(store)
    election.start()
    store.release()  # the epoch node's creation (the memory store creates through multi)
    assert len(store.held) == 1 and store.held[0][0][0].path == paths.CONTROLLER
    # The claim of the seat is in flight.
    stopped = defer.Deferred.fromCoroutine(election.stop())
    assert not stopped.called  # the stop waits its turn behind the election step
    store.release()  # the claim lands: the election wins after stop() was called
    # Then the stop's step resigns and vacates the seat it won (a conditional delete).
    assert [op.path for ops, _ in store.held for op in ops] == [paths.CONTROLLER]
    store.release()
    assert stopped.called
    assert user.calls == [("elected", 1, 1), ("resigned",)]
    assert not election.active and paths.CONTROLLER not in store.nodes
