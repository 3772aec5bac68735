"""A follower's incremental session fetch reads only the partitions with news for it
(``FetchPath._with_news``) and must leave everything as reading every partition would: the
same answer, the same high watermarks, the same view of the follower (its log end, when it
was last caught up, so the ISR shrinks exactly as before) and the same ISR expansions.

Each test drives two leaders through the same steps on the same clock: one given the session
context (the broker's path), one given only the session's full list of partitions (every
partition read, the rows then picked by ``FetchContext.select``)."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from twisted.internet import task

from broker_core.log import LogConfig, LogManager
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.wire.records import Record, build_batch
from tests.support.inline_pool import InlinePool

PARTITIONS = 4


class Leader:
    """Broker 1 leading ``t``-0..3 (replicas 1, 2, 3) and follower 2's session on it."""

    def __init__(self, path, clock: task.Clock, *, skip_quiet: bool) -> None:
        self.clock = clock
        self.skip_quiet = skip_quiet
        logs = LogManager(path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
        pool = InlinePool()
        self.rm = ReplicaManager(1, logs, clock=clock, io_pool=pool, reactor=pool,
                                 topic_log_config=lambda topic: LogConfig(),
                                 metadata_cache=MetadataCache(),
                                 min_insync_replicas=lambda topic: 2)
        self.proposed: list = []
        self.rm._propose_isr = lambda p, isr: self.proposed.append((p.topic_partition, isr))
        self.session_id = 0
        self.epoch = 0

    def lead(self, isr: tuple[int, ...], leader_epoch: int = 1,
             partitions: range = range(PARTITIONS)) -> None:
        self.rm.apply_leader_and_isr(1, [
            ("t", p, LeaderAndIsrState(1, leader_epoch, isr, (1, 2, 3), 1, 0))
            for p in partitions], full=False)

    def fetch(self, replica: int, named: dict[int, int], *, epoch: int = 1,
              full: bool = False, wait_ms: int = 0) -> list:
        """Follower ``replica`` fetches, naming ``named`` (partition: offset); follower 2
        keeps a session (opened by a full fetch), follower 3 fetches in full each time."""
        entries = [("t", p, o, 1 << 20, epoch) for p, o in named.items()]
        if replica == 2:
            ctx = self.rm.fetch_sessions.context(2, 0 if full else self.session_id,
                                                 0 if full else self.epoch, entries)
            assert ctx.error is None
            self.session_id = ctx.session_id
            self.epoch = ctx.session.next_epoch
        else:
            ctx = self.rm.fetch_sessions.context(replica, 0, -1, entries)
        got: list = []
        self.rm.fetch(ctx.entries, max_wait_ms=wait_ms, min_bytes=1, max_bytes=10 << 20,
                      replica_id=replica, session=ctx if self.skip_quiet else None
                      ).addCallback(lambda rows: got.append(ctx.select(rows)))
        self.answers = got
        return self.rows()

    def rows(self) -> list | None:
        """The last fetch's answer, None while it is parked."""
        if not self.answers:
            return None
        return [(t, p, r.error, r.high_watermark, r.log_start_offset, r.records)
                for t, p, r in self.answers[0]]

    def produce(self, partition: int, value: bytes) -> None:
        self.rm.append(-1, 30000, [("t", partition, build_batch([Record(None, value)]))])
        self.clock.advance(0)

    def state(self) -> list:
        """Everything the read path may change, per partition."""
        out = []
        for p in range(PARTITIONS):
            part = self.rm.get_partition("t", p)
            remotes = sorted(astuple(r) for r in part.remotes.values())
            out.append((part.high_watermark, part.log.log_end_offset, remotes))
        return out


@pytest.fixture
def pair(tmp_path):
    clock = task.Clock()
    clock.advance(1000)
    leaders = [Leader(tmp_path / "skip", clock, skip_quiet=True),
               Leader(tmp_path / "read", clock, skip_quiet=False)]
    yield clock, leaders
    for leader in leaders:
        leader.rm.log_manager.shutdown()


def same(leaders, step):
    """Run ``step`` on both leaders; both give the same answer and end in the same state."""
    answers = [step(leader) for leader in leaders]
    assert answers[0] == answers[1]
    assert leaders[0].state() == leaders[1].state()
    assert leaders[0].proposed == leaders[1].proposed
    return answers[0]


def test_quiet_partitions_are_left_out_and_their_follower_stays_caught_up(pair):
    clock, leaders = pair
    same(leaders, lambda leader: leader.lead((1, 2, 3)))
    first = same(leaders, lambda leader: leader.fetch(2, dict.fromkeys(range(4), 0), full=True))
    assert len(first) == PARTITIONS  # a full fetch answers every partition
    clock.advance(5)
    assert same(leaders, lambda leader: leader.fetch(2, {})) == []  # nothing new anywhere
    caught_up = leaders[0].rm.get_partition("t", 3).remotes[2].last_caught_up_time_ms
    assert caught_up == int(clock.seconds() * 1000)  # recorded as fetched now, unread
    # An append after a long idle spell: the follower was caught up at its last fetch, so the
    # leader does not count the whole idle spell as lag.
    clock.advance(60)
    same(leaders, lambda leader: leader.fetch(2, {}))
    same(leaders, lambda leader: leader.produce(3, b"x"))
    part = leaders[0].rm.get_partition("t", 3)
    # (follower 3 has not fetched at all: it is out of sync in both)
    assert part.out_of_sync_replicas(int(clock.seconds() * 1000), 30000) == [3]
    rows = same(leaders, lambda leader: leader.fetch(2, {}))
    assert [(p, len(records) > 0) for _, p, _, _, _, records in rows] == [(3, True)]


def test_news_unnamed_partitions_are_answered(pair):
    clock, leaders = pair
    same(leaders, lambda leader: leader.lead((1, 2, 3)))
    same(leaders, lambda leader: leader.fetch(2, dict.fromkeys(range(4), 0), full=True))
    same(leaders, lambda leader: leader.produce(1, b"a"))
    rows = same(leaders, lambda leader: leader.fetch(2, {}))  # new data past its offset
    assert [(p, hw, len(r) > 0) for _, p, _, hw, _, r in rows] == [(1, 0, True)]
    # Named once it copied it; the HW waits for follower 3, so there is nothing to answer.
    assert same(leaders, lambda leader: leader.fetch(2, {1: 1})) == []
    same(leaders, lambda leader: leader.fetch(3, {0: 0, 1: 1, 2: 0, 3: 0}))
    assert leaders[0].rm.get_partition("t", 1).high_watermark == 1
    rows = same(leaders, lambda leader: leader.fetch(2, {}))  # only the HW moved
    assert [(p, hw, r) for _, p, _, hw, _, r in rows] == [(1, 1, b"")]
    assert same(leaders, lambda leader: leader.fetch(2, {})) == []  # answered: quiet again


def test_a_moved_leadership_is_answered_for_an_unnamed_partition(pair):
    clock, leaders = pair
    same(leaders, lambda leader: leader.lead((1, 2, 3)))
    same(leaders, lambda leader: leader.fetch(2, dict.fromkeys(range(4), 0), full=True))
    same(leaders, lambda leader: leader.lead((1, 2, 3), leader_epoch=2, partitions=range(2, 3)))
    rows = same(leaders, lambda leader: leader.fetch(2, {}))
    assert [(p, error) for _, p, error, _, _, _ in rows] == [(2, "FENCED_LEADER_EPOCH")]


def test_a_follower_outside_the_isr_is_read_in_full_and_let_back_in(pair):
    clock, leaders = pair
    same(leaders, lambda leader: leader.lead((1, 3)))
    same(leaders, lambda leader: leader.fetch(2, dict.fromkeys(range(4), 0), full=True))
    same(leaders, lambda leader: leader.fetch(2, {}))
    # Caught up (it asked for the log end) but outside the ISR: each fetch proposes it back.
    assert leaders[0].proposed
    assert {tp for tp, _ in leaders[0].proposed} == {("t", p) for p in range(PARTITIONS)}


def test_a_parked_fetch_answers_with_the_partitions_that_have_news(pair):
    clock, leaders = pair
    same(leaders, lambda leader: leader.lead((1, 2, 3)))
    same(leaders, lambda leader: leader.fetch(2, dict.fromkeys(range(4), 0), full=True))
    assert same(leaders, lambda leader: leader.fetch(2, {}, wait_ms=500)) is None  # parked
    same(leaders, lambda leader: leader.produce(2, b"b"))  # the end of the turn answers it
    rows = same(leaders, lambda leader: leader.rows())
    assert [(p, len(r) > 0) for _, p, _, _, _, r in rows] == [(2, True)]
    # Parked again with nothing new: the wait runs out and the answer is empty.
    assert same(leaders, lambda leader: leader.fetch(2, {2: 1}, wait_ms=500)) is None
    clock.advance(0.5)
    assert same(leaders, lambda leader: leader.rows()) == []
