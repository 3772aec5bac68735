"""Rebalancing (docs/design.md): the handlers that run rebalances and the algorithm they run.

Handlers ("rebalance handler threads", docs/design.md#shared-decisions): N workers on the
reactor sharing one queue of group ids, oldest request first. A free handler takes the oldest
group that no other handler is running (its ``curr_rebalancer``), so one group is never
rebalanced by two handlers at once, and a group never waits behind a slow rebalance while
another handler is free. Handlers run concurrently (each is a coroutine awaiting ZooKeeper and
consumers).

One rebalance of a group (:func:`rebalance`) is up to ``rebalance.max.retries`` attempts, with
``rebalance.backoff.ms`` between them. One attempt (:func:`attempt`) walks these states:

====================  =====================================================  =================
state                 does                                                   next
====================  =====================================================  =================
ASSIGN                topics, partitions (ZooKeeper), threads, assignment    CHECK
CHECK                 is a rebalance necessary (owners in ZooKeeper, what    STOP or done
                      each member acknowledged)?
STOP                  StopFetcher to every member whose partitions change,   COMMIT or failed
                      wait for all
COMMIT                write the group's offsets (fenced)                     START
START                 StartFetcher (partitions, offsets, brokers) to the     OWNERS or failed
                      same members, wait for all
OWNERS                write the owners (fenced)                              done
====================  =====================================================  =================

Only the members whose partitions change take part (:func:`members_to_move`): with the
coordinator's sticky assignor (coordinator.assignor) a member joining a group of ``n`` takes
its share from a few others, so a join storm's rebalances stop and start a few members each
instead of every member every time (docs/coordinator.md, "Incremental rebalances"). The
others keep fetching their partitions throughout; a partition that moves has no owner from
its old owner's StopFetcher answer to its new owner's StartFetcher.

A wait ends at the first failure (expiry after 2/3 of the member's session timeout, a closed
channel, an error answer): the design's fast fail. If a newer rebalance request for the group is
already queued (a member joined or failed meanwhile), the failed rebalance is not retried: the
queued one takes over with the current membership.

A rebalance superseded by a newer request (``group.rebalance_initiated`` set again while it
runs: a member joined or left, a topic changed) stops at its next phase boundary before START:
after ASSIGN/CHECK, after STOP or after COMMIT (:class:`Superseded`), for at most
``supersede_bound_s`` from the first supersession since the group's last completed rebalance.
Its assignment is for a membership that no longer exists, so sending it would cost a
StartFetcher to its members now and a StopFetcher to them again in the queued rebalance.
Stopping there is safe: a member sent a StopFetcher here is unsettled
(``ConsumerRegistry.started`` turns False when the request goes out, answered or not), so the
queued rebalance counts it among the members it stops and starts, and it stops every one of
them before it starts anyone; and the offsets the stopped members reported are in the registry
(the queued rebalance commits them and starts from them). Once StartFetchers are out the attempt
finishes (writes the owners), since the members already hold that generation. So a join storm
costs rebalances that end early while members keep arriving, and one that completes once they
pause, or once the bound has passed (a storm that never pauses still gets its members
started).

The algorithm reaches the world only through a :class:`RebalanceContext` (the coordinator
service), so it is unit-tested with a fake one and ``task.Clock``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from coordinator.assignor import IPartitionAssignor, TopicPartition
from coordinator.purgatories import Outcome
from coordinator.registry import ConsumerRegistry, GroupRegistry

log = Logger(namespace="sluice.coordinator.rebalance")

COMPLETED = "completed"
UNNECESSARY = "unnecessary"
FAILED = "failed"
ABANDONED = "abandoned"  # superseded by a newer request, or the coordinator stepped down


class NotCoordinator(Exception):
    """This broker is no longer the coordinator (epoch check failed, resigned, stopped)."""


class Superseded(Exception):
    """A newer rebalance request for the group is pending: the attempt stops at a phase
    boundary and the queued rebalance takes over (not a failure, not retried)."""


class AttemptFailed(Exception):
    """One rebalance attempt failed; ``reason`` is a short label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RebalanceContext(Protocol):
    """What a rebalance needs from the coordinator (all Deferred-returning calls may fail with
    :class:`NotCoordinator`)."""

    clock: IReactorTime
    assignor: IPartitionAssignor
    backoff_s: float
    max_retries: int
    #: How long a group's rebalances may keep being superseded before one runs to the end.
    supersede_bound_s: float

    def can_act(self, group: GroupRegistry) -> bool:
        """The coordinator may act for ``group``: it is active, not suspended, and ``group``
        is its registry of this term (a rebalance of an earlier term, waiting out a backoff
        across a resignation and re-election, must not write under the new epoch)."""
    def known_topics(self) -> set[str]: ...
    def read_partitions(self, topics: set[str]) -> Awaitable[dict[str, list[int]]]: ...
    def read_owners(self, group: GroupRegistry) -> Awaitable[dict[TopicPartition, str]]: ...
    def load_committed(self, group: GroupRegistry, tps: Sequence[TopicPartition]
                       ) -> Awaitable[None]: ...
    def commit(self, group: GroupRegistry) -> Awaitable[None]: ...
    def write_owners(self, group: GroupRegistry, new: Mapping[TopicPartition, str],
                     old: Mapping[TopicPartition, str]) -> Awaitable[None]: ...
    def send_stop(self, member: ConsumerRegistry) -> defer.Deferred: ...
    def send_start(self, member: ConsumerRegistry, generation: int,
                   ownership: list[dict]) -> defer.Deferred: ...
    def rebalance_finished(self, group: GroupRegistry, result: str, seconds: float) -> None: ...
    def attempt_failed(self, group: GroupRegistry, reason: str) -> None: ...


# -- pure parts ------------------------------------------------------------------------------------

def thread_owner(thread_id: str) -> str:
    """The consumer id of Kafka's thread id ``<consumer_id>-<n>``."""
    head, sep, tail = thread_id.rpartition("-")
    return head if sep and tail.isdigit() else thread_id


def compute_assignment(assignor: IPartitionAssignor, members: Sequence[ConsumerRegistry],
                       partitions: Mapping[str, Sequence[int]]) -> dict[TopicPartition, str]:
    """Rebalance step 1: threads per topic from the members' topic counts, then the assignor,
    told what each member owns now (what it acknowledged: ``ConsumerRegistry.owned``)."""
    threads: dict[str, list[str]] = {}
    for topic in partitions:
        ids: list[str] = []
        for m in members:
            ids.extend(m.topic_count.thread_ids(m.consumer_id, topic))
        threads[topic] = ids
    previous = {tp: thread for m in members for tp, thread in m.owned.items()}
    return assignor.assign(partitions, threads, previous)


def members_to_move(members: Sequence[ConsumerRegistry],
                    shares: Mapping[str, Mapping[TopicPartition, str]]) -> list[ConsumerRegistry]:
    """The members a rebalance stops and starts: those whose partitions change (a partition
    they lose, one they gain, or a thread of theirs that changes), and every member that is
    not settled (``ConsumerRegistry.started`` False: never started by this coordinator, or a
    StopFetcher or StartFetcher sent to it since its last acknowledged StartFetcher, whose
    answer may not have come). The others fetch exactly their share already and go on
    fetching: every partition that moves is given up by a member in this list and taken by
    one, and a member whose state is unknown is stopped before anyone is started."""
    return [m for m in members
            if not m.started or m.owned != shares.get(m.consumer_id, {})]


def rebalance_reason(assignment: Mapping[TopicPartition, str],
                     zk_owners: Mapping[TopicPartition, str],
                     members: Sequence[ConsumerRegistry]) -> str | None:
    """Rebalance step 3 (``isRebalanceNecessary``), plus what each member acknowledged; None when
    the assignment is already in force everywhere."""
    for m in members:
        if not m.started:
            return (f"member {m.consumer_id} has not been started by this coordinator "
                    "since its last StopFetcher or StartFetcher was sent")
    if assignment and not zk_owners:
        return "no owners registered in ZooKeeper"
    for tp in assignment:
        if tp not in zk_owners:
            return f"partition {tp[0]}-{tp[1]} is not owned"
    for tp in zk_owners:
        if tp not in assignment:
            return f"owner of {tp[0]}-{tp[1]} is stale (partition gone or not subscribed)"
    if dict(zk_owners) != dict(assignment):
        return "ownership differs from the new assignment"
    acknowledged: dict[TopicPartition, str] = {}
    for m in members:
        acknowledged.update(m.owned)
    if acknowledged != dict(assignment):
        return "members' acknowledged partitions differ from the assignment"
    return None


def by_member(assignment: Mapping[TopicPartition, str]) -> dict[str, dict[TopicPartition, str]]:
    """The assignment split per consumer id, in one pass (a 1,000-member group must not scan
    the whole assignment once per member)."""
    out: dict[str, dict[TopicPartition, str]] = {}
    for tp, thread in assignment.items():
        out.setdefault(thread_owner(thread), {})[tp] = thread
    return out


def ownership_for(member: ConsumerRegistry, assignment: Mapping[TopicPartition, str],
                  offset_of: Callable[[TopicPartition], int]) -> list[dict]:
    """The StartFetcher ``ownership`` of one member from its share of the assignment (or from
    the whole assignment, filtered): its threads with their partitions and start offsets."""
    by_thread: dict[str, list[dict]] = {}
    for tp, thread in sorted(assignment.items()):
        if thread_owner(thread) == member.consumer_id:
            by_thread.setdefault(thread, []).append(
                {"topic": tp[0], "partition": tp[1], "offset": offset_of(tp)})
    return [{"consumer_thread_id": t, "partitions": ps} for t, ps in sorted(by_thread.items())]


# -- waiting ----------------------------------------------------------------------------------------

async def wait_all(outcomes: Sequence[tuple[ConsumerRegistry, defer.Deferred]], what: str
                   ) -> None:
    """Wait for every member's outcome; raise :class:`AttemptFailed` at the first that is not
    OK (without waiting for the others: fast fail)."""
    if not outcomes:
        return
    done: defer.Deferred = defer.Deferred()
    remaining = [len(outcomes)]

    def one(outcome: Outcome, member: ConsumerRegistry) -> None:
        if done.called:
            return
        if not outcome.ok:
            done.errback(AttemptFailed(f"{what}_{outcome.kind}",
                                       f"{what} to {member.consumer_id}: {outcome.kind} "
                                       f"({outcome.detail})"))
            return
        remaining[0] -= 1
        if remaining[0] == 0:
            done.callback(None)

    for member, d in outcomes:
        d.addCallback(one, member)
        d.addErrback(lambda f: log.failure("rebalance wait callback failed", f))
    await done


# -- one attempt -----------------------------------------------------------------------------------

async def attempt(ctx: RebalanceContext, group: GroupRegistry) -> str:
    """One rebalance attempt; returns COMPLETED or UNNECESSARY, raises :class:`AttemptFailed`
    or :class:`NotCoordinator`. See the module docstring for the states."""
    # ASSIGN: a snapshot of the members; it does not change during the attempt even if the
    # registry does.
    clock = ctx.clock
    t0 = clock.seconds()
    members = sorted(group.members.values(), key=lambda m: m.consumer_id)
    zk_owners = await ctx.read_owners(group)
    if not members:
        if zk_owners:
            await ctx.write_owners(group, {}, zk_owners)
        return UNNECESSARY
    partitions = await ctx.read_partitions(group.topics(ctx.known_topics()))
    assignment = compute_assignment(ctx.assignor, members, partitions)

    # CHECK
    reason = rebalance_reason(assignment, zk_owners, members)
    if reason is None:
        return UNNECESSARY
    log.info("rebalancing group {g} ({n} members, {p} partitions, queued {q:.3f}s): {why}",
             g=group.group_id, n=len(members), p=len(assignment), q=group.queue_wait_s,
             why=reason)
    _check(ctx, group, newer_aborts=True)

    # STOP the members whose partitions change: nobody owns a partition that moves from the
    # moment its old owner has answered. The others keep their partitions and go on fetching.
    t_read = clock.seconds()
    shares = by_member(assignment)
    moving = members_to_move(members, shares)
    stops = []
    for m in moving:
        stops.append((m, ctx.send_stop(m)))
    await wait_all(stops, "stop_fetcher")
    _check(ctx, group, newer_aborts=True)

    # COMMIT, and learn the committed offsets of partitions we know nothing of.
    t_stop = clock.seconds()
    await ctx.commit(group)
    await ctx.load_committed(group, [tp for tp in assignment if tp not in group.offsets])
    _check(ctx, group, newer_aborts=True)

    # START
    t_commit = clock.seconds()
    generation = group.generation + 1
    starts = []
    for m in moving:
        ownership = ownership_for(m, shares.get(m.consumer_id, {}), group.start_offset)
        starts.append((m, ctx.send_start(m, generation, ownership)))
    await wait_all(starts, "start_fetcher")
    _check(ctx, group)

    # OWNERS. The members hold the new generation from here on, whatever the
    # write's fate; the owners' znode keeps it for the next coordinator.
    t_start = clock.seconds()
    group.generation = generation
    await ctx.write_owners(group, assignment, zk_owners)
    t_end = clock.seconds()
    # Where a rebalance's time goes, for operators tuning big groups.
    log.info("group {g} generation {gen} ({m} of {n} members moved): read+assign {a:.3f}s, "
             "stop {b:.3f}s, commit {c:.3f}s, start {d:.3f}s, owners {e:.3f}s",
             g=group.group_id, gen=generation, m=len(moving), n=len(members), a=t_read - t0,
             b=t_stop - t_read, c=t_commit - t_stop, d=t_start - t_commit, e=t_end - t_start)
    return COMPLETED


def _check(ctx: RebalanceContext, group: GroupRegistry, *, newer_aborts: bool = False) -> None:
    """A phase boundary: stop when the coordinator stepped down or a member failed, and (with
    ``newer_aborts``, only before START) when a newer request superseded this rebalance, unless
    the group's rebalances have been superseded for ``ctx.supersede_bound_s`` already: then this
    one runs to the end, so a storm that never pauses still gets assignments out."""
    if not ctx.can_act(group):
        raise NotCoordinator()
    if group.rebalance_failed is not None:
        raise AttemptFailed("member_failed", group.rebalance_failed)
    if newer_aborts and group.rebalance_initiated:
        now = ctx.clock.seconds()
        if group.superseded_since is None:
            group.superseded_since = now
        if now - group.superseded_since < ctx.supersede_bound_s:
            raise Superseded()


async def rebalance(ctx: RebalanceContext, group: GroupRegistry) -> str:
    """A rebalance with retries: returns COMPLETED, UNNECESSARY, FAILED or ABANDONED."""
    started = ctx.clock.seconds()
    result = FAILED
    try:
        for n in range(1, ctx.max_retries + 1):
            if not ctx.can_act(group):
                result = ABANDONED
                return result
            group.rebalance_failed = None
            group.rebalancing = True
            try:
                result = await attempt(ctx, group)
                group.superseded_since = None  # the membership's assignment is in force
                return result
            except NotCoordinator:
                result = ABANDONED
                return result
            except Superseded:
                log.info("rebalance of group {g} superseded by a newer request; it takes over",
                         g=group.group_id)
                result = ABANDONED
                return result
            except AttemptFailed as e:
                reason, detail = e.reason, e.detail
            except Exception as e:  # a ZooKeeper error, a bug: retried like any failure
                log.failure("rebalance attempt of group {g} raised", g=group.group_id)
                reason, detail = "error", str(e)
            finally:
                group.rebalancing = False
                group.queue_wait_s = 0.0  # a retry waits on the backoff, not in the queue
            ctx.attempt_failed(group, reason)
            log.warn("rebalance attempt {n}/{max} of group {g} failed: {detail}", n=n,
                     max=ctx.max_retries, g=group.group_id, detail=detail)
            if reason.endswith("_lost") or reason == "member_failed":
                # A channel closed: its consumer's failure handling runs right after the
                # channel's requests fail; give it one reactor turn to queue the new request.
                await task.deferLater(ctx.clock, 0, lambda: None)
            if group.rebalance_initiated or not group.members:
                result = ABANDONED  # a newer request (membership changed) takes over
                return result
            if n < ctx.max_retries:
                await task.deferLater(ctx.clock, ctx.backoff_s, lambda: None)
                if group.rebalance_initiated:
                    result = ABANDONED
                    return result
        group.rebalance_failures += 1
        log.error("ConsumerRebalanceFailed: group {g} could not be rebalanced in {n} attempts",
                  g=group.group_id, n=ctx.max_retries)
        result = FAILED
        return result
    finally:
        ctx.rebalance_finished(group, result, ctx.clock.seconds() - started)


# -- handlers --------------------------------------------------------------------------------------

@dataclass
class _Handler:
    index: int
    running: bool = False


class RebalanceHandlers:
    """N rebalance workers sharing one queue of group ids; see the module docstring.

    Invariants: a group id is in the queue at most once; a group is run by at most one handler
    at a time, the one named by its ``curr_rebalancer`` (set from when a handler takes the group
    until that run ends, None otherwise); a handler takes the oldest queued group that no
    handler is running. So no handler is idle while the queue holds a group it could run: a
    group waits only while every handler is busy, or while its own previous rebalance runs.
    """

    def __init__(self, count: int, lookup: Callable[[str], GroupRegistry | None],
                 run: Callable[[GroupRegistry], Awaitable[Any]], *,
                 clock: IReactorTime | None = None,
                 waited: Callable[[float], None] | None = None) -> None:
        """``clock`` times each group's wait in the queue (``GroupRegistry.queue_wait_s``),
        reported to ``waited`` as it is dequeued: with every handler busy, a group that asked
        for a rebalance waits for one to finish, which is part of its members' join time."""
        if count < 1:
            raise ValueError(f"need at least one rebalance handler, got {count}")
        self.handlers = [_Handler(i) for i in range(count)]
        #: Group ids waiting for a handler, oldest request first.
        self.queue: deque[str] = deque()
        self.lookup = lookup
        self.run = run
        self.clock = clock
        self.waited = waited
        self._stopped = False

    def queued(self) -> int:
        return len(self.queue)

    def submit(self, group: GroupRegistry) -> None:
        """Queue a rebalance of ``group`` (the caller set ``rebalance_initiated``); an idle
        handler takes it at once unless the group's previous rebalance is still running."""
        if self._stopped:
            return
        if group.group_id not in self.queue:
            self.queue.append(group.group_id)
            if self.clock is not None:
                group.queued_at = self.clock.seconds()
        if group.curr_rebalancer is None:
            idle = next((h for h in self.handlers if not h.running), None)
            if idle is not None:
                idle.running = True
                d = defer.Deferred.fromCoroutine(self._work(idle))
                d.addErrback(lambda f: log.failure("rebalance handler {i} failed", f,
                                                   i=idle.index))

    def stop(self) -> None:
        self._stopped = True
        self.queue.clear()

    def _take(self) -> GroupRegistry | None:
        """Dequeue the oldest group no handler is running (dropping groups that are gone)."""
        i = 0
        while i < len(self.queue):
            gid = self.queue[i]
            group = self.lookup(gid)
            if group is None:
                del self.queue[i]
                continue
            if group.curr_rebalancer is None:
                del self.queue[i]
                return group
            i += 1
        return None

    async def _work(self, h: _Handler) -> None:
        # A loop rather than one task per group: a run that ends without waiting (a group with
        # nothing to do) must not recurse into the next one.
        try:
            while not self._stopped:
                group = self._take()
                if group is None:
                    break
                group.curr_rebalancer = h.index
                group.rebalance_initiated = False  # cleared when dequeued
                if self.clock is not None and group.queued_at is not None:
                    group.queue_wait_s = self.clock.seconds() - group.queued_at
                    if self.waited is not None:
                        self.waited(group.queue_wait_s)
                group.queued_at = None
                try:
                    await self.run(group)
                except Exception:
                    log.failure("rebalance of group {g} failed", g=group.group_id)
                finally:
                    group.curr_rebalancer = None
        finally:
            h.running = False
