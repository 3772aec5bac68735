"""The consumer coordinator as a rebalance sees it
(:class:`coordinator.rebalance.RebalanceContext`): ZooKeeper reads of partitions and owners,
the fenced write of owners, StopFetcher / StartFetcher sends, and the rebalance metrics.

:class:`CoordinatorRebalanceContext` reads and writes through its
:class:`~coordinator.service.CoordinatorService` (store, fenced writer, committer,
purgatories); the owners it read or wrote are cached on each ``GroupRegistry``.

Invariants:

- every write is fenced (:meth:`CoordinatorService.fenced`): a rebalance of a coordinator
  that lost its seat writes nothing;
- ``group.zk_owners`` is either what ZooKeeper holds or None (unknown: a write whose outcome
  is not known); a read lifts ``group.generation`` to the one stored with the owners, so
  generations keep growing across failovers;
- an answer from a member that failed meanwhile changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import Create, Delete, NoNode, SetData
from broker_core.wire.apis import ApiKey
from coordinator import purgatories, rebalance
from coordinator.assignor import IPartitionAssignor, TopicPartition
from coordinator.consumer_requests import broker_list
from coordinator.registry import ConsumerRegistry, GroupRegistry

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator")


class CoordinatorRebalanceContext:
    """See the module docstring; ``service`` is the coordinator whose groups rebalance."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service

    @property
    def clock(self) -> IReactorTime:
        return self.service.clock

    @property
    def assignor(self) -> IPartitionAssignor:
        return self.service.assignor

    @property
    def backoff_s(self) -> float:
        return self.service.backoff_s

    @property
    def max_retries(self) -> int:
        return self.service.max_retries

    @property
    def supersede_bound_s(self) -> float:
        # The bound of a group's wait for arrivals to pause bounds supersession too.
        return self.service.config.initial_rebalance_delay_ms / 1000.0

    def can_act(self, group: GroupRegistry) -> bool:
        return (self.service.can_act()
                and self.service.registries.groups.get(group.group_id) is group)

    def known_topics(self) -> set[str]:
        return set(self.service.listeners.topics)

    async def load_committed(self, group: GroupRegistry, tps: Sequence[TopicPartition]) -> None:
        await self.service.load_committed(group, tps)

    async def commit(self, group: GroupRegistry) -> None:
        await self.service.commit(group)

    async def read_partitions(self, topics: set[str]) -> dict[str, list[int]]:
        names = sorted(topics)
        if not names:
            return {}
        raw = await self.service.store.get_many([paths.topic(t) for t in names])
        out = {}
        for t, r in zip(names, raw, strict=True):
            if r is None:
                continue
            try:
                out[t] = sorted(paths.TopicAssignment.from_bytes(r[0]).partitions)
            except ValueError as e:
                log.warn("unreadable assignment of topic {t}: {e}", t=t, e=e)
        return out

    async def read_owners(self, group: GroupRegistry) -> dict[TopicPartition, str]:
        """The owners in ZooKeeper (read once, then as this coordinator wrote them; see
        ``GroupRegistry.zk_owners``); a read also lifts ``group.generation`` to the one stored
        with them, so generations keep growing across coordinator failovers."""
        if group.zk_owners is not None:
            return dict(group.zk_owners)
        owners = await self._read_owners(group)
        group.zk_owners = dict(owners)
        return owners

    async def _read_owners(self, group: GroupRegistry) -> dict[TopicPartition, str]:
        gid = group.group_id
        try:
            data, _ = await self.service.store.get(paths.consumer_owners(gid))
            topics = await self.service.store.get_children(paths.consumer_owners(gid))
        except NoNode:
            return {}
        stored = paths.parse_offset_value(data)  # a decimal, like an offset
        if stored is not None and stored > group.generation:
            group.generation = stored
        tps: list[TopicPartition] = []
        for t in sorted(topics):
            try:
                children = await self.service.store.get_children(paths.consumer_owners_topic(gid, t))
            except NoNode:
                continue
            tps.extend((t, int(p)) for p in children if p.isdigit())
        if not tps:
            return {}
        raw = await self.service.store.get_many([paths.consumer_owner(gid, *tp) for tp in tps])
        return {tp: r[0].decode("utf-8", "replace") for tp, r in zip(tps, raw, strict=True)
                if r is not None}

    async def write_owners(self, group: GroupRegistry, new: Mapping[TopicPartition, str],
                           old: Mapping[TopicPartition, str]) -> None:
        gid = group.group_id
        ops: list[Any] = []
        parents = set()
        for tp, thread in sorted(new.items()):
            path = paths.consumer_owner(gid, *tp)
            if tp not in old:
                parents.add(paths.consumer_owners_topic(gid, tp[0]))
                ops.append(Create(path, thread.encode()))
            elif old[tp] != thread:
                ops.append(SetData(path, thread.encode()))
        for tp in sorted(set(old) - set(new)):
            ops.append(Delete(paths.consumer_owner(gid, *tp)))
        # The generation travels with the owners it produced (read back by read_owners).
        await self.service.ensure_path(paths.consumer_owners(gid))
        ops.append(SetData(paths.consumer_owners(gid), str(group.generation).encode()))
        for parent in sorted(parents):
            await self.service.ensure_path(parent)
        group.zk_owners = None  # unknown until the write is known to have happened
        await self.service.fenced(ops)
        group.zk_owners = dict(new)

    def send_stop(self, m: ConsumerRegistry) -> defer.Deferred:
        g = self.service.registries.groups.get(m.group_id)
        self._sending(m)

        def answered(body: Any) -> Any:
            if body.error_code == 0 and m.alive:
                if body.offsets and g is not None:
                    g.record_offsets(m, ((o.topic, o.partition, o.offset) for o in body.offsets))
                m.owned = {}  # stopped: it owns nothing until its next StartFetcher
            return body

        req = m.channel.request(ApiKey.STOP_FETCHER, 0, {"consumer_id": m.consumer_id})
        req.addCallback(answered)
        return purgatories.watch(self.service.stop_purgatory, m.key, m.response_timeout_s, req)

    def send_start(self, m: ConsumerRegistry, generation: int,
                   ownership: list[dict]) -> defer.Deferred:
        sent = self._sending(m)

        def answered(body: Any) -> Any:
            if body.error_code == 0 and m.alive:
                # Answers come in the order the requests went out on the channel, so this is
                # what the consumer fetches now, even when the answer is late; it is settled
                # only if nothing was sent to it after this StartFetcher.
                m.owned = {(p["topic"], p["partition"]): t["consumer_thread_id"]
                           for t in ownership for p in t["partitions"]}
                m.started = sent == m.fetcher_requests
            return body

        req = m.channel.request(ApiKey.START_FETCHER, 0, {
            "consumer_id": m.consumer_id, "generation_id": generation & 0x7FFFFFFF,
            "ownership": ownership,
            # Where the consumer fetches from: the brokers on the listener it came on.
            "brokers": broker_list(self.service.brokers(),
                                   getattr(m.channel, "listener", None))})
        req.addCallback(answered)
        return purgatories.watch(self.service.start_purgatory, m.key, m.response_timeout_s, req)

    @staticmethod
    def _sending(m: ConsumerRegistry) -> int:
        """A StopFetcher or StartFetcher is about to go to ``m``: until a StartFetcher is
        acknowledged it is not settled (what it fetches is unknown, or nothing), so every
        later rebalance stops and starts it. Returns the request's number."""
        m.started = False
        m.fetcher_requests += 1
        return m.fetcher_requests

    def rebalance_finished(self, group: GroupRegistry, result: str, seconds: float) -> None:
        if result == rebalance.COMPLETED:
            log.info("group {g} rebalanced (generation {gen}) in {s:.3f}s", g=group.group_id,
                     gen=group.generation, s=seconds)
        if self.service.metrics is not None and result != rebalance.ABANDONED:
            self.service.metrics.coordinator_rebalances_total.labels(result=result).inc()
            if result == rebalance.COMPLETED:
                self.service.metrics.coordinator_rebalance_duration_seconds.observe(seconds)
        if (result == rebalance.FAILED and self.can_act(group)
                and any(not m.started for m in group.members.values())):
            # Members were stopped, or their state is unknown (a refused or unanswered
            # request), and no event may come to rebalance them again: the group would sit
            # unconsumed. Try again after the backoff, for as long as this goes on.
            group.not_before = max(group.not_before, self.clock.seconds() + self.backoff_s)
            self.service.request_rebalance(group)

    def attempt_failed(self, group: GroupRegistry, reason: str) -> None:
        if self.service.metrics is not None:
            self.service.metrics.coordinator_rebalance_attempts_failed_total.labels(reason=reason).inc()
