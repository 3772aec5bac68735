"""The broker's coordinator shards (docs/coordinator.md#sharding): groups are spread over
``count`` shards by :func:`coordinator.shard_hash.shard_of`; each shard is elected and fenced
on its own (:mod:`coordinator.elector`) and served by its own
:class:`~coordinator.service.CoordinatorService` on the broker that won it.

:class:`CoordinatorShards` owns:

- the cluster's shard count (:mod:`coordinator.shard_count`), agreed at start and watched
  after: an unusable stored count, or one that changes value or is deleted once agreed
  (every group would move), leaves the broker without coordination (every shard's service
  stopped, every group request answered COORDINATOR_NOT_AVAILABLE), never crashes it;
- its announcement ``/coordinator_shards/brokers/[id]`` (ephemeral; created once the count is
  agreed and the watches are set, re-created if it vanishes while running, deleted on stop);
- the placement (:mod:`coordinator.shard_placement`): from the brokers ready to coordinate
  (a children watch on ``/coordinator_shards/brokers``: a broker registered in
  ``/brokers/ids`` but still starting, failed, or of a release without shards is never named
  owner of a shard nobody would then stand for), recomputed once the set has been quiet for
  ``settle_s`` on the injected clock (but at most ``SETTLE_BOUND`` settle times after the
  first change not yet placed), so a rolling start does not move shards back and forth.
  The broker stands (has a service) for exactly the shards it is the desired owner of: a
  newly desired shard's service starts and stands; a shard no longer desired is stopped
  (pending offsets written, resigned, seat vacated, channels closed: its members re-register
  once with the new owner);
- the legacy seat (``/consumers/coordinator``: an earlier release's single coordinator,
  during a rolling upgrade): while it exists this broker stands for no shard (a shard's
  coordinator and the old one would both write a group) and names its holder as every
  group's coordinator; once it is gone, placement runs at once;
- the seat watches of every shard (``owners``), so any broker can say who coordinates a
  group (ClusterMetadata, FindCoordinator);
- the routing: every request naming a group goes to its shard's service; a broker without an
  active service for that shard answers NOT_COORDINATOR naming the shard and its known owner
  and changes nothing. Requests naming several groups or none are split per shard
  (:class:`ShardedKafkaGroups`, :class:`ShardedGroupDeletion`, DescribeConsumerGroups);
- the broker-wide coordinator gauges, summed over its shards.

Invariants: everything runs on the reactor thread; placement changes are applied one at a
time (a lock), stops before starts; a service is never reused after it stopped (a shard
desired again gets a fresh one).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import MetadataStoreError, NodeExists
from broker_core.server.channel import ServerChannel
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import describe_groups, offset_fetch
from coordinator.assignor import IPartitionAssignor
from coordinator.consumer_requests import (
    broker_list,
    cluster_metadata_answer,
    not_coordinator_error,
)
from coordinator.elector import owner_of
from coordinator.kafka_groups import find_coordinator
from coordinator.service import CoordinatorConfig, CoordinatorService
from coordinator.shard_count import BadShardCount, agree_shard_count, parse_shard_count
from coordinator.shard_hash import shard_of
from coordinator.shard_placement import desired_owners

log = Logger(namespace="sluice.coordinator.shards")

#: How long the live-broker set must stay unchanged before shards move (seconds).
SETTLE_S = 1.0
#: Placement waits for a quiet live set, but at most this many settle times after the first
#: change not yet placed (a flapping registration must not postpone it forever).
SETTLE_BOUND = 5
#: Pause before agreeing on the shard count again after a metadata-store error (seconds).
RETRY_S = 1.0

#: The per-service purgatories whose gauges are exported summed over the shards.
_PURGATORIES: dict[str, Callable[[CoordinatorService], Any]] = {
    "coordinator_ping": lambda s: s.ping_purgatory,
    "coordinator_stop_fetcher": lambda s: s.stop_purgatory,
    "coordinator_start_fetcher": lambda s: s.start_purgatory,
    "classic_group_heartbeat": lambda s: s.kafka.heartbeat_purgatory,
    "classic_group_rebalance": lambda s: s.kafka.rebalance_purgatory,
}


def _live_ids(children: Iterable[str] | None) -> frozenset[int]:
    """Broker ids from ``/coordinator_shards/brokers`` children; anything but a decimal id is
    ignored."""
    out = set()
    for c in children or ():
        if c.isascii() and c.isdigit() and len(c) <= 10:
            out.add(int(c))
    return frozenset(out)


class CoordinatorShards:
    """See the module docstring. ``configured_shards`` is this broker's
    ``group.coordinator.shards`` (used only when it creates the stored count); the other
    arguments are each shard's :class:`~coordinator.service.CoordinatorService`'s."""

    def __init__(self, broker_id: int, store: Any, *, clock: IReactorTime,
                 config: CoordinatorConfig | None = None, configured_shards: int = 12,
                 brokers: Callable[[], Iterable[Any]] = lambda: (), metrics: Any = None,
                 assignor: IPartitionAssignor | None = None,
                 channel_factory: Callable[[], Any] = ServerChannel,
                 settle_s: float = SETTLE_S) -> None:
        self.broker_id = broker_id
        self.store = store
        self.clock = clock
        self.config = config or CoordinatorConfig()
        self.configured_shards = configured_shards
        self.brokers = brokers
        self.metrics = metrics
        self.assignor = assignor
        self.channel_factory = channel_factory
        self.settle_s = settle_s
        #: The cluster's shard count (None until agreed, or when the stored one is unusable).
        self.count: int | None = None
        #: Why there is no count ("" while it is being agreed).
        self.unusable = ""
        #: The services of the shards this broker stands for, by shard.
        self.services: dict[int, CoordinatorService] = {}
        #: Each shard's seat holder as last seen (-1: vacant or unreadable).
        self.owners: dict[int, int] = {}
        #: The brokers ready to coordinate as last read from ``/coordinator_shards/brokers``.
        self.live: frozenset[int] = frozenset()
        #: The legacy seat's holder while it exists (-1: unreadable), None while it is absent.
        self.legacy: int | None = None
        #: The live set the last placement was made for (what "joined since" is measured from).
        self._placed_live: frozenset[int] = frozenset()
        self._reported = False
        self.stopped = False
        self._watches: list[Any] = []
        self._settle: IDelayedCall | None = None
        #: When the first live-set change not yet placed was seen (None: all placed).
        self._unplaced_since: float | None = None
        self._retry: IDelayedCall | None = None
        self._placing = defer.DeferredLock()
        #: Fires once the count is agreed and the watches are set, or coordination is refused
        #: (an unusable count), or the shards are stopped; never after a failed attempt that
        #: is retried.
        self.started: defer.Deferred | None = None
        self.kafka = ShardedKafkaGroups(self)
        self.deletion = ShardedGroupDeletion(self)
        if metrics is not None:
            self._export(metrics)

    def _export(self, metrics: Any) -> None:
        def active() -> list[CoordinatorService]:
            return [s for s in self.services.values() if s.active]

        metrics.active_coordinator.set_function(lambda: 1 if active() else 0)
        metrics.coordinator_shards_active.set_function(lambda: len(active()))
        metrics.coordinator_members.set_function(
            lambda: sum(s.members for s in self.services.values()))
        metrics.coordinator_groups.set_function(
            lambda: sum(s.group_count for s in self.services.values()))
        for name, get in _PURGATORIES.items():
            metrics.track_purgatory(
                name, size=lambda get=get: sum(get(s).size for s in self.services.values()),
                delayed=lambda get=get: sum(get(s).delayed for s in self.services.values()))

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> defer.Deferred:
        """Agree on the shard count, then follow the seats and the live brokers (call after
        the broker registered itself; again is a no-op). Returns :attr:`started`, one
        Deferred however many attempts the agreement takes."""
        if self.started is None:
            self.started = defer.Deferred()
            self._attempt_start()
        return self.started

    def _attempt_start(self) -> None:
        self._retry = None
        d = defer.Deferred.fromCoroutine(self._start())
        d.addErrback(lambda f: log.failure("coordinator shards did not start", f))
        d.addCallback(lambda finished: self._started() if finished is not False else None)

    def _started(self) -> None:
        if self.started is not None and not self.started.called:
            self.started.callback(None)

    async def _start(self) -> bool:
        """One attempt; False when another is scheduled (a metadata-store error)."""
        if self.stopped:
            return True
        try:
            count = await agree_shard_count(self.store, self.configured_shards)
            for path in (paths.COORDINATOR_SHARD_SEATS, paths.COORDINATOR_SHARD_EPOCHS,
                         paths.COORDINATOR_SHARD_BROKERS):
                await self.store.ensure_path(path)
        except BadShardCount as e:
            self.unusable = f"this broker coordinates no group: {e}"
            log.error("refusing to coordinate consumer groups: {e}", e=e)
            return True
        except MetadataStoreError as e:
            if self.stopped:
                return True
            log.warn("agreeing on the coordinator shard count failed ({e}); retrying in {s}s",
                     e=e, s=RETRY_S)
            self._retry = self.clock.callLater(RETRY_S, self._attempt_start)
            return False
        if self.stopped:
            return True
        self.count = count
        log.info("groups are spread over {n} coordinator shards", n=count)
        for k in range(count):
            self._watches.append(self.store.watch_data(paths.coordinator_shard_seat(k),
                                                       partial(self._on_seat, k)))
        self._watches.append(self.store.watch_data(paths.COORDINATOR_SHARD_COUNT,
                                                   self._on_count))
        self._watches.append(self.store.watch_data(paths.LEGACY_COORDINATOR, self._on_legacy))
        self._watches.append(self.store.watch_children(paths.COORDINATOR_SHARD_BROKERS,
                                                       self._on_brokers))
        # Last: other brokers place shards on this one only once it follows the seats.
        self._watches.append(self.store.watch_data(
            paths.coordinator_shard_broker(self.broker_id), self._on_announcement))
        return True

    def _on_count(self, data: bytes | None, stat: Any) -> None:
        """The agreed count must not change: a changed or deleted count would hash groups to
        other shards than their coordinators hold. Refuse coordination from then on."""
        if self.count is None or self.stopped:
            return
        try:
            if parse_shard_count(data) == self.count:
                return
            why = f"it changed from {self.count} to {data[:16]!r}"
        except BadShardCount as e:
            why = "it was deleted" if data is None else f"it changed to an unusable value ({e})"
        self.unusable = (f"this broker coordinates no group: {paths.COORDINATOR_SHARD_COUNT} "
                         f"was agreed as {self.count}, then {why}; restart the brokers once "
                         "it is restored")
        log.error("refusing to coordinate consumer groups: {why}", why=self.unusable)
        self.count = None
        if self._settle is not None and self._settle.active():
            self._settle.cancel()
        self._placing.run(self._stop_all).addErrback(
            lambda f: log.failure("stopping the coordinator shards failed", f))
        self.store.delete(paths.coordinator_shard_broker(self.broker_id)).addErrback(
            lambda f: f.trap(MetadataStoreError))

    def _on_announcement(self, data: bytes | None, stat: Any) -> None:
        """(Re-)announce this broker when its node is absent: at start, and after a lost
        session took the ephemeral node with it."""
        if data is not None or self.stopped or self.count is None:
            return
        self.store.create(paths.coordinator_shard_broker(self.broker_id), b"",
                          ephemeral=True).addErrback(self._announce_failed)

    def _announce_failed(self, f: Any) -> None:
        if f.check(NodeExists):
            return  # announced meanwhile (or a lost session's node, whose removal is watched)
        if f.check(MetadataStoreError):
            log.warn("announcing broker {b} as ready to coordinate failed ({e}); retried "
                     "when the session's watches are delivered again", b=self.broker_id, e=f.value)
            return
        log.failure("announcing broker ready to coordinate failed", f)

    async def stop(self) -> None:
        """Stop following, and stop every shard's service (each writes its pending offsets,
        resigns and vacates its seat)."""
        self.stopped = True
        for call in (self._settle, self._retry):
            if call is not None and call.active():
                call.cancel()
        self._started()  # no attempt follows: whoever waits for the start must not hang
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        if self.count is not None:
            try:
                await self.store.delete(paths.coordinator_shard_broker(self.broker_id))
            except MetadataStoreError:
                pass  # absent, or the session is gone and the ephemeral node with it
        await self._placing.run(self._stop_all)

    async def _stop_all(self) -> None:
        services, self.services = self.services, {}
        for k in sorted(services):
            await services[k].stop()

    # -- watches and placement ---------------------------------------------------------------------

    def _on_seat(self, shard: int, data: bytes | None, stat: Any) -> None:
        owner = -1
        if data is not None:
            try:
                owner = owner_of(data)
            except ValueError:
                # Unreadable or an id out of range: no coordinator is named for it.
                log.warn("unreadable seat of coordinator shard {k}: {v!r}", k=shard, v=data[:80])
        self.owners[shard] = owner

    def _on_legacy(self, data: bytes | None, stat: Any) -> None:
        """Follow the legacy seat: while it exists stand for nothing; place once it is gone."""
        if data is None:
            if self.legacy is None:
                return
            self.legacy = None
            log.info("the earlier release's coordinator seat {p} is gone: broker {b} stands "
                     "for its coordinator shards", p=paths.LEGACY_COORDINATOR, b=self.broker_id)
        else:
            try:
                holder = owner_of(data)
            except ValueError:
                holder = -1
            if holder == self.legacy:
                return
            first = self.legacy is None
            self.legacy = holder
            if first:
                log.warn("{p} is held by broker {h} (a release before coordinator shards): "
                         "broker {b} stands for no coordinator shard until it is gone",
                         p=paths.LEGACY_COORDINATOR, h=holder if holder >= 0 else "unreadable",
                         b=self.broker_id)
        if not self.stopped:
            self._place_now()

    def _on_brokers(self, children: list[str] | None) -> None:
        live = _live_ids(children)
        if live == self.live and self._reported:
            return  # a repeat (a reconnected session's watch): nothing moved
        self.live, self._reported = live, True
        now = self.clock.seconds()
        if self._unplaced_since is None:
            self._unplaced_since = now
        delay = min(self.settle_s, self._unplaced_since + SETTLE_BOUND * self.settle_s - now)
        if self._settle is not None and self._settle.active():
            self._settle.reset(max(0.0, delay))
        else:
            self._settle = self.clock.callLater(max(0.0, delay), self._settled)

    def _settled(self) -> None:
        self._settle = None
        self._unplaced_since = None
        self._place_now()

    def _place_now(self) -> None:
        self._placing.run(self._place).addErrback(
            lambda f: log.failure("placing coordinator shards failed", f))

    async def _place(self) -> None:
        """Stand for the shards desired now; stop the services of those no longer desired,
        except the shards this broker is serving that are not wanted by a broker that joined.

        A shard this broker coordinates moves only to a broker that joined since the last
        placement. When brokers only leave, the balancing can name another survivor as the
        desired owner of a shard served here (the cap per broker changed). Moving it would
        make its members register again for no failure of theirs. So it stays, and the
        desired owner stands for it in case this broker goes. Killing a broker therefore
        moves its shards and no others.
        """
        if self.stopped or self.count is None:
            return
        if self.legacy is not None:
            # An earlier release's coordinator serves every group: a shard's would write too.
            services, self.services = self.services, {}
            for k in sorted(services):
                log.info("coordinator shard {k}: resigning while {p} is held",
                         k=k, p=paths.LEGACY_COORDINATOR)
                await services[k].stop()
            return
        owners = desired_owners(self.live, self.count)
        joined = self.live - self._placed_live
        self._placed_live = self.live
        desired = frozenset(k for k, b in owners.items() if b == self.broker_id)
        for k in sorted(set(self.services) - desired):
            svc = self.services[k]
            if svc.active and self.broker_id in self.live and owners.get(k) not in joined:
                continue
            del self.services[k]
            log.info("coordinator shard {k} no longer belongs to broker {b}; resigning it",
                     k=k, b=self.broker_id)
            await svc.stop()
        for k in sorted(desired - set(self.services)):
            if self.stopped or self.count is None or self.legacy is not None:
                return  # stopped, the count refused or the legacy seat taken while we waited
            svc = CoordinatorService(
                self.broker_id, self.store, clock=self.clock, shard=k, shard_count=self.count,
                config=self.config, brokers=self.brokers, metrics=self.metrics,
                assignor=self.assignor, channel_factory=self.channel_factory)
            self.services[k] = svc
            log.info("broker {b} stands for coordinator shard {k}", b=self.broker_id, k=k)
            svc.start()

    # -- routing -------------------------------------------------------------------------------------

    def shard_of(self, group_id: str) -> int:
        """The shard of ``group_id`` (-1 while there is no count)."""
        return -1 if self.count is None else shard_of(group_id, self.count)

    def owner(self, shard: int) -> int:
        """The broker coordinating ``shard`` as this broker knows it (-1: none); while the
        legacy seat exists, its holder (it serves every group)."""
        if self.legacy is not None:
            return self.legacy
        svc = self.services.get(shard)
        if svc is not None and svc.active:
            return self.broker_id
        return self.owners.get(shard, -1)

    def for_group(self, group_id: str) -> CoordinatorService | None:
        """The service of ``group_id``'s shard on this broker (active or not), or None when
        this broker does not stand for it."""
        return self.services.get(self.shard_of(group_id))

    def refusal(self, group_id: str) -> dict:
        """The error answer for a request about ``group_id`` that this broker's services do
        not serve (nothing is changed)."""
        if self.count is None:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    "error_message": self.unusable or "the coordinator shards are starting; "
                                                      "retry shortly"}
        k = self.shard_of(group_id)
        return not_coordinator_error(self.broker_id, k, self.owner(k))

    def refusal_code(self) -> ErrorCode:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if self.count is None else \
            ErrorCode.NOT_COORDINATOR

    def active_services(self) -> list[CoordinatorService]:
        return [self.services[k] for k in sorted(self.services) if self.services[k].active]

    # -- thin-client requests ------------------------------------------------------------------------

    def coordinator_of(self, group_id: str | None) -> tuple[int, str]:
        """The broker coordinating ``group_id``'s shard as this broker knows it, and why there
        is none when it is -1. None (v0): shard 0's when the cluster has one shard, else -1
        asking for v1."""
        if self.count is None:
            return -1, self.refusal("")["error_message"]
        if self.legacy is not None:
            return self.legacy, f"{paths.LEGACY_COORDINATOR} is unreadable; retry shortly"
        if group_id is None:
            if self.count != 1:
                return -1, (f"groups are spread over {self.count} coordinator shards; ask "
                            "ClusterMetadata v1 with the group id")
            k = 0
        else:
            k = self.shard_of(group_id)
        return self.owner(k), f"no coordinator of shard {k} is elected yet; retry shortly"

    def locate(self, group_id: str | None, listener: str | None) -> dict:
        """ClusterMetadata's answer for ``group_id`` (see :meth:`coordinator_of`)."""
        coordinator, unknown = self.coordinator_of(group_id)
        return cluster_metadata_answer(coordinator, self.brokers(), listener, unknown=unknown)

    def cluster_metadata(self, header: Any, body: Any, listener: str | None = None) -> dict:
        return self.locate(getattr(body, "group_id", None), listener)

    def register_consumer(self, header: Any, body: Any, proto: Any) -> dict:
        svc = self.for_group(body.group_id)
        if svc is None:
            return self.refusal(body.group_id)
        return svc.register_consumer(header, body, proto)

    async def commit_offsets(self, header: Any, body: Any, *, principal: str | None = None,
                             topic_allowed: Callable[[str], bool] | None = None) -> dict:
        svc = self.for_group(body.group_id)
        if svc is None:
            return {**self.refusal(body.group_id), "partitions": []}
        return await svc.commit_offsets(header, body, principal=principal,
                                        topic_allowed=topic_allowed)

    async def unregister_consumer(self, header: Any, body: Any, *,
                                  principal: str | None = None,
                                  topic_allowed: Callable[[str], bool] | None = None) -> dict:
        svc = self.for_group(body.group_id)
        if svc is None:
            return {**self.refusal(body.group_id), "partitions": []}
        return await svc.unregister_consumer(header, body, principal=principal,
                                             topic_allowed=topic_allowed)

    def describe_consumer_groups(self, header: Any, body: Any) -> dict:
        """Every group (``groups`` null): those of the shards active here (NOT_COORDINATOR
        when none is); named groups: each answered by its shard, NOT_COORDINATOR for one of
        a shard not active here."""
        if body.groups is None:
            active = self.active_services()
            if not active:
                return {"error_code": int(self.refusal_code()),
                        "error_message": f"broker {self.broker_id} coordinates no group shard "
                                         "(ask each group's coordinator: ClusterMetadata v1)",
                        "groups": []}
            groups = []
            for svc in active:
                answer = svc.describe_consumer_groups(header, body)
                if answer["error_code"]:
                    return answer
                groups.extend(answer["groups"])
            return {"error_code": 0, "error_message": None,
                    "groups": sorted(groups, key=lambda g: g["group_id"])}
        out = []
        for gid in body.groups:
            svc = self.for_group(gid)
            answer = None
            if svc is not None:
                one = copy.copy(body)
                one.groups = [gid]
                answer = svc.describe_consumer_groups(header, one)
            if answer is not None and not answer["error_code"]:
                out.extend(answer["groups"])
                continue
            code = answer["error_code"] if answer is not None else int(self.refusal_code())
            out.append({"group_id": gid, "error_code": code, "state": "dead",
                        "generation_id": -1, "rebalance_failures": 0, "members": [],
                        "offsets": []})
        return {"error_code": 0, "error_message": None, "groups": out}


def _with(body: Any, **fields: Any) -> Any:
    """A shallow copy of a request with ``fields`` replaced (one shard's part of it)."""
    one = copy.copy(body)
    for k, v in fields.items():
        setattr(one, k, v)
    return one


class ShardedKafkaGroups:
    """Kafka's group APIs routed per group to the shards (same methods as
    :class:`~coordinator.kafka_groups.KafkaGroupApis`); a group whose shard this broker does
    not stand for is answered NOT_COORDINATOR."""

    def __init__(self, shards: CoordinatorShards) -> None:
        self.shards = shards

    def _refused(self, key: ApiKey, version: int, body: Any) -> dict:
        return SUPPORTED[key].error_body(version, body, int(self.shards.refusal_code()))

    def find_coordinator(self, version: int, body: Any, listener: str | None,
                         allowed: Callable[[str], bool]) -> dict:
        # The broker list once per request, whatever the number of keys (v4 batches them).
        return find_coordinator(version, body, self.shards.coordinator_of,
                                broker_list(self.shards.brokers(), listener), allowed)

    def join_group(self, version: int, body: Any, **kw: Any) -> Any:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return defer.succeed(self._refused(ApiKey.JOIN_GROUP, version, body))
        return svc.kafka.join_group(version, body, **kw)

    def sync_group(self, version: int, body: Any) -> Any:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return defer.succeed(self._refused(ApiKey.SYNC_GROUP, version, body))
        return svc.kafka.sync_group(version, body)

    def heartbeat(self, version: int, body: Any) -> dict:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return self._refused(ApiKey.HEARTBEAT, version, body)
        return svc.kafka.heartbeat(version, body)

    def leave_group(self, version: int, body: Any) -> dict:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return self._refused(ApiKey.LEAVE_GROUP, version, body)
        return svc.kafka.leave_group(version, body)

    async def offset_commit(self, version: int, body: Any, **kw: Any) -> dict:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return self._refused(ApiKey.OFFSET_COMMIT, version, body)
        return await svc.kafka.offset_commit(version, body, **kw)

    async def offset_fetch(self, version: int, body: Any, **kw: Any) -> dict:
        """v8+ names several groups: each is fetched from its own shard."""
        if version < 8:
            svc = self.shards.for_group(body.group_id)
            if svc is None:
                return self._refused(ApiKey.OFFSET_FETCH, version, body)
            return await svc.kafka.offset_fetch(version, body, **kw)
        groups = []
        for g in body.groups or []:
            svc = self.shards.for_group(g.group_id)
            if svc is None:
                groups.extend(offset_fetch.error_body(version, _with(body, groups=[g]),
                                                      int(self.shards.refusal_code()))["groups"])
                continue
            answer = await svc.kafka.offset_fetch(version, _with(body, groups=[g]), **kw)
            groups.extend(answer["groups"])
        return {"throttle_time_ms": 0, "groups": groups}

    def list_groups(self, version: int, body: Any, allowed: Callable[[str], bool]) -> dict:
        """The classic groups of the shards active on this broker (Kafka's ListGroups is per
        broker too: a client asks every broker)."""
        groups = []
        for svc in self.shards.active_services():
            answer = svc.kafka.list_groups(version, body, allowed)
            if answer["error_code"]:
                return answer
            groups.extend(answer["groups"])
        return {"throttle_time_ms": 0, "error_code": 0,
                "groups": sorted(groups, key=lambda g: g["group_id"])}

    def describe_groups(self, version: int, body: Any, allowed: Callable[[str], bool]) -> dict:
        out = []
        for gid in body.groups or []:
            svc = self.shards.for_group(gid)
            if svc is None:
                out.append(describe_groups.dead_group(gid, int(self.shards.refusal_code())))
                continue
            out.extend(svc.kafka.describe_groups(version, _with(body, groups=[gid]),
                                                 allowed)["groups"])
        return {"throttle_time_ms": 0, "groups": out}


class ShardedGroupDeletion:
    """DeleteGroups and OffsetDelete routed per group to the shards (same methods as
    :class:`~coordinator.group_deletion.GroupDeletion`)."""

    def __init__(self, shards: CoordinatorShards) -> None:
        self.shards = shards

    async def delete_groups(self, version: int, body: Any,
                            allowed: Callable[[str], bool]) -> dict:
        results = []
        for gid in body.groups_names or []:
            svc = self.shards.for_group(gid)
            if not allowed(gid):
                code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            elif svc is None:
                code = int(self.shards.refusal_code())
            else:
                answer = await svc.deletion.delete_groups(
                    version, _with(body, groups_names=[gid]), allowed)
                results.extend(answer["results"])
                continue
            results.append({"group_id": gid, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

    async def offset_delete(self, version: int, body: Any, **kw: Any) -> dict:
        svc = self.shards.for_group(body.group_id)
        if svc is None:
            return SUPPORTED[ApiKey.OFFSET_DELETE].error_body(
                version, body, int(self.shards.refusal_code()))
        return await svc.deletion.offset_delete(version, body, **kw)
