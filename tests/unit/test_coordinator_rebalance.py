"""The rebalance algorithm and handlers against a fake context on task.Clock: the design's
steps in order, isRebalanceNecessary, expiry, fast fail, retries with backoff, give-up, and a
group pinned to one handler."""

from __future__ import annotations

import json
from types import SimpleNamespace

from twisted.internet import defer, task

from broker_core.purgatory import Purgatory
from coordinator import purgatories, rebalance
from coordinator.assignor import RangeAssignor
from coordinator.registry import ConsumerRegistry, Registries
from coordinator.topic_count import parse


def member(group, cid, streams=1, timeout_ms=3000):
    text = json.dumps({"version": 1, "pattern": "static", "subscription": {"t": streams}})
    return ConsumerRegistry(group, cid, parse(text), text, True, "smallest", timeout_ms)


class FakeContext:
    """A RebalanceContext: ZooKeeper is two dicts; consumers answer at once unless told
    otherwise (``mute`` holds consumer ids that never answer)."""

    def __init__(self, partitions=4):
        self.clock = task.Clock()
        self.assignor = RangeAssignor()
        self.backoff_s = 1.0
        self.max_retries = 3
        self.supersede_bound_s = 3.0
        self.partitions = {"t": list(range(partitions))}
        self.owners: dict = {}
        self.zk_offsets: dict = {}
        self.events: list = []
        self.mute: set[str] = set()
        self.active = True
        self.purgatory = Purgatory("test", self.clock)
        self.finished: list = []
        self.failures: list = []

    def can_act(self, group):
        return self.active

    def known_topics(self):
        return set(self.partitions)

    async def read_partitions(self, topics):
        return {t: ps for t, ps in self.partitions.items() if t in topics}

    async def read_owners(self, group):
        return dict(self.owners)

    async def load_committed(self, group, tps):
        for tp in tps:
            if tp in self.zk_offsets:
                group.note_committed(tp, self.zk_offsets[tp])

    async def commit(self, group):
        self.events.append(("commit", sorted(group.dirty)))
        for tp in list(group.dirty):
            self.zk_offsets[tp] = group.offsets[tp]
            group.note_committed(tp, group.offsets[tp])

    async def write_owners(self, group, new, old):
        self.events.append(("owners", dict(new)))
        self.owners = dict(new)

    def _send(self, kind, m, body):
        req: defer.Deferred = defer.Deferred()
        self.events.append((kind, m.consumer_id))
        d = purgatories.watch(self.purgatory, (kind, m.key), m.response_timeout_s, req)
        if m.consumer_id not in self.mute:
            req.callback(body)
        return d

    def send_stop(self, m):
        offsets = [SimpleNamespace(topic=t, partition=p, offset=100 + p)
                   for (t, p) in sorted(m.owned)]
        m.started = False  # what the service does on sending, and with the answer
        if m.consumer_id not in self.mute:
            self.group.record_offsets(m, [(o.topic, o.partition, o.offset) for o in offsets])
            m.owned = {}
        return self._send("stop", m, SimpleNamespace(error_code=0, offsets=offsets))

    def send_start(self, m, generation, ownership):
        self.events.append(("start_body", m.consumer_id, generation, ownership))
        m.started = False
        d = self._send("start", m, SimpleNamespace(error_code=0))
        if m.consumer_id not in self.mute:
            m.owned = {(p["topic"], p["partition"]): t["consumer_thread_id"]
                       for t in ownership for p in t["partitions"]}
            m.started = True
        return d

    def rebalance_finished(self, group, result, seconds):
        self.finished.append((result, seconds))

    def attempt_failed(self, group, reason):
        self.failures.append(reason)


def setup(n=2, partitions=4):
    ctx = FakeContext(partitions)
    r = Registries()
    ms = [member("g", f"c{i}") for i in range(n)]
    for m in ms:
        g = r.add_member(m, 0.0)
    ctx.group = g
    return ctx, g, ms


def run(ctx, g):
    return defer.Deferred.fromCoroutine(rebalance.rebalance(ctx, g))


def test_a_rebalance_stops_all_commits_starts_all_then_writes_owners():
    ctx, g, (a, b) = setup()
    ctx.zk_offsets[("t", 3)] = 7
    d = run(ctx, g)
    assert d.result == rebalance.COMPLETED
    kinds = [e[0] for e in ctx.events if e[0] != "start_body"]
    assert kinds == ["stop", "stop", "commit", "start", "start", "owners"]
    assert ctx.owners == {("t", 0): "c0-0", ("t", 1): "c0-0", ("t", 2): "c1-0",
                          ("t", 3): "c1-0"}
    bodies = {e[1]: e[3] for e in ctx.events if e[0] == "start_body"}
    # Offsets: the committed one where there is one, else -1 (auto_offset_reset).
    assert bodies["c1"] == [{"consumer_thread_id": "c1-0", "partitions": [
        {"topic": "t", "partition": 2, "offset": -1}, {"topic": "t", "partition": 3, "offset": 7}]}]
    assert g.generation == 1 and a.started and b.started
    assert ctx.finished == [(rebalance.COMPLETED, 0.0)]


def test_nothing_is_sent_when_the_assignment_is_already_in_force():
    ctx, g, _ = setup()
    run(ctx, g)
    ctx.events.clear()
    d = run(ctx, g)
    assert d.result == rebalance.UNNECESSARY
    assert ctx.events == []
    assert g.generation == 1


def test_stop_fetcher_offsets_are_committed_before_start_fetcher():
    ctx, g, (a, b) = setup()
    run(ctx, g)
    g.members.pop("c1")  # as the registry would after b failed
    ctx.events.clear()
    d = run(ctx, g)
    assert d.result == rebalance.COMPLETED
    commit = next(e for e in ctx.events if e[0] == "commit")
    assert commit == ("commit", [("t", 0), ("t", 1)])  # a's StopFetcher offsets
    body = next(e for e in ctx.events if e[0] == "start_body")
    offsets = {p["partition"]: p["offset"] for t in body[3] for p in t["partitions"]}
    assert offsets == {0: 100, 1: 101, 2: -1, 3: -1}


def test_expired_stop_fetcher_fails_the_attempt_and_it_is_retried_after_the_backoff():
    ctx, g, (a, b) = setup()
    ctx.mute.add("c1")
    g.queue_wait_s = 4.0  # it waited for a handler before its first attempt
    d = run(ctx, g)
    ctx.clock.advance(2.0)  # 2/3 of the 3 s session timeout: b's StopFetcher expires
    assert not d.called
    assert ctx.failures == ["stop_fetcher_expired"]
    assert g.queue_wait_s == 0.0  # the retry waits on the backoff, not in the queue
    ctx.mute.clear()
    ctx.clock.advance(0.99)
    assert not d.called  # still backing off
    ctx.clock.advance(0.01)
    assert d.result == rebalance.COMPLETED
    assert ctx.finished[0][0] == rebalance.COMPLETED and ctx.finished[0][1] == 3.0


def test_a_rebalance_gives_up_after_max_retries():
    ctx, g, _ = setup()
    ctx.mute.add("c0")
    d = run(ctx, g)
    for _ in range(10):
        ctx.clock.advance(1.0)
    assert d.result == rebalance.FAILED
    assert ctx.failures == ["stop_fetcher_expired"] * 3
    assert g.rebalance_failures == 1
    assert ctx.owners == {}  # nothing written for a failed rebalance


def test_a_closed_channel_fails_fast_and_a_newer_request_takes_over():
    ctx, g, (a, b) = setup()
    pending: list[defer.Deferred] = []
    ctx.send_stop = lambda m: pending.append(defer.Deferred()) or purgatories.watch(
        ctx.purgatory, m.key, m.response_timeout_s, pending[-1])
    d = run(ctx, g)
    assert len(pending) == 2 and not d.called
    g.rebalance_initiated = True  # the failure handler asked for a new rebalance
    pending[1].errback(ConnectionError("closed"))  # b's channel closed
    ctx.clock.advance(0)  # one reactor turn for the failure handler
    assert d.result == rebalance.ABANDONED  # no backoff wait, no retry
    assert ctx.failures == ["stop_fetcher_lost"]


def test_a_resigned_coordinator_abandons():
    ctx, g, _ = setup()
    ctx.active = False
    assert run(ctx, g).result == rebalance.ABANDONED
    assert ctx.events == []


def test_an_emptied_group_has_its_owners_removed():
    ctx, g, (a, b) = setup()
    run(ctx, g)
    g.members.clear()
    assert run(ctx, g).result == rebalance.UNNECESSARY
    assert ctx.owners == {}


def test_rebalance_reasons():
    a, b = member("g", "a"), member("g", "b")
    assignment = {("t", 0): "a-0", ("t", 1): "b-0"}
    assert "not been started" in rebalance.rebalance_reason(assignment, assignment, [a, b])
    a.started = b.started = True
    assert "no owners" in rebalance.rebalance_reason(assignment, {}, [a, b])
    assert "not owned" in rebalance.rebalance_reason(assignment, {("t", 0): "a-0"}, [a, b])
    stale = {**assignment, ("t", 9): "a-0"}
    assert "stale" in rebalance.rebalance_reason(assignment, stale, [a, b])
    swapped = {("t", 0): "b-0", ("t", 1): "a-0"}
    assert "differs" in rebalance.rebalance_reason(assignment, swapped, [a, b])
    assert "acknowledged" in rebalance.rebalance_reason(assignment, assignment, [a, b])
    a.owned, b.owned = {("t", 0): "a-0"}, {("t", 1): "b-0"}
    assert rebalance.rebalance_reason(assignment, assignment, [a, b]) is None


def test_thread_owner_and_ownership_for():
    assert rebalance.thread_owner("consumer-1-12") == "consumer-1"
    assert rebalance.thread_owner("plain") == "plain"
    m = member("g", "c-1", streams=2)
    out = rebalance.ownership_for(m, {("t", 0): "c-1-0", ("t", 1): "c-1-1", ("t", 2): "c-10-0"},
                                  lambda tp: tp[1] * 10)
    assert out == [{"consumer_thread_id": "c-1-0", "partitions": [
                       {"topic": "t", "partition": 0, "offset": 0}]},
                   {"consumer_thread_id": "c-1-1", "partitions": [
                       {"topic": "t", "partition": 1, "offset": 10}]}]


def _gated_handlers(count: int, *gids: str):
    """``count`` handlers over groups ``gids`` whose every rebalance waits on a Deferred of
    ``gates[gid]`` (one per run, in order); ``order`` lists the runs as they start."""
    r = Registries()
    for gid in gids:
        r.add_member(member(gid, "a"), 0.0)
    gates: dict[str, list[defer.Deferred]] = {}
    order: list[str] = []

    async def run_one(group):
        order.append(group.group_id)
        d: defer.Deferred = defer.Deferred()
        gates.setdefault(group.group_id, []).append(d)
        await d

    h = rebalance.RebalanceHandlers(count, r.groups.get, run_one)
    return h, [r.groups[g] for g in gids], gates, order


def _request(h, *groups) -> None:
    for g in groups:
        g.rebalance_initiated = True
        h.submit(g)


def test_handlers_never_run_one_group_twice_at_once():
    h, (g1, g2, g3), gates, order = _gated_handlers(2, "g1", "g2", "g3")
    _request(h, g1, g2, g3)
    assert order == ["g1", "g2"]  # two handlers run concurrently; g3 waits for a free one
    assert (g1.curr_rebalancer, g2.curr_rebalancer, g3.curr_rebalancer) == (0, 1, None)
    # A new request for g1 while it runs waits for that run to end, behind g3.
    _request(h, g1)
    assert list(h.queue) == ["g3", "g1"] and g1.rebalance_initiated  # cleared when taken
    gates["g2"][0].callback(None)  # handler 1 is free: g3 is the oldest it may run
    assert order == ["g1", "g2", "g3"] and g3.curr_rebalancer == 1
    assert list(h.queue) == ["g1"]  # g1 still running on handler 0: not taken twice
    gates["g3"][0].callback(None)  # handler 1 free again, g1 still running: it idles
    assert order == ["g1", "g2", "g3"] and not h.handlers[1].running
    gates["g1"][0].callback(None)  # the run ends; its handler takes the queued request
    assert order == ["g1", "g2", "g3", "g1"] and g1.curr_rebalancer == 0
    gates["g1"][1].callback(None)
    assert all(g.curr_rebalancer is None for g in (g1, g2, g3))
    assert not h.queue and not any(x.running for x in h.handlers)


def test_a_group_does_not_wait_behind_a_slow_rebalance_while_a_handler_is_free():
    # Before the shared queue, groups went to handlers round robin and queued behind the
    # handler's current run: here g3 would have waited for g1 while handler 1 sat idle.
    h, (g1, g2, g3), gates, order = _gated_handlers(2, "g1", "g2", "g3")
    _request(h, g1, g2)
    gates["g2"][0].callback(None)  # g2 is quick; g1 goes on
    _request(h, g3)
    assert order == ["g1", "g2", "g3"] and g3.curr_rebalancer == 1
    gates["g3"][0].callback(None)
    gates["g1"][0].callback(None)
    assert not h.queue and not any(x.running for x in h.handlers)


def test_handlers_take_the_oldest_request_first_and_drop_groups_that_are_gone():
    h, (g1, g2, g3), gates, order = _gated_handlers(1, "g1", "g2", "g3")
    _request(h, g1, g3, g2)
    h.lookup = lambda gid, groups={g.group_id: g for g in (g1, g2)}: groups.get(gid)
    gates["g1"][0].callback(None)  # g3 was deleted meanwhile: skipped, g2 runs
    assert order == ["g1", "g2"] and not h.queue
    gates["g2"][0].callback(None)
    assert not h.handlers[0].running


def test_handlers_time_each_groups_wait_in_the_queue():
    r = Registries()
    for gid in ("g1", "g2"):
        r.add_member(member(gid, "a"), 0.0)
    clock = task.Clock()
    gates: dict[str, defer.Deferred] = {}
    waits: list[float] = []

    async def run_one(group):
        gates[group.group_id] = d = defer.Deferred()
        await d

    h = rebalance.RebalanceHandlers(1, r.groups.get, run_one, clock=clock, waited=waits.append)
    g1, g2 = r.groups["g1"], r.groups["g2"]
    for g in (g1, g2):
        g.rebalance_initiated = True
        h.submit(g)
    assert waits == [0.0] and g1.queue_wait_s == 0.0  # a free handler: no wait
    assert g2.queued_at == 0.0
    clock.advance(2.5)  # g1's rebalance takes 2.5 s; g2 waits behind it on the one handler
    gates["g1"].callback(None)
    assert waits == [0.0, 2.5] and g2.queue_wait_s == 2.5 and g2.queued_at is None
    gates["g2"].callback(None)
    # without a clock nothing is timed
    untimed = rebalance.RebalanceHandlers(1, r.groups.get, run_one)
    g1.rebalance_initiated = True
    untimed.submit(g1)
    assert g1.queued_at is None
