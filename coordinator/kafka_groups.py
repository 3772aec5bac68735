"""Kafka's group APIs on Sluice's coordinator: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups and DescribeGroups, for standard
Kafka clients (``group.id`` + ``subscribe()``), beside the thin-client groups of
:mod:`coordinator.service`.

:class:`KafkaGroupApis` turns decoded requests into calls on the classic-group state machine
(:mod:`coordinator.classic`, whose timers run on the coordinator's purgatories) and
into offset reads and writes through the coordinator's own fenced commit path
(:meth:`CoordinatorService._commit_accepted`, which queues them for the committer's group
commit; the same ``/consumers/[group]/offsets`` znodes, in both metadata modes). ACLs are
the broker handler's job (:mod:`broker_core.server.group_apis`); this module gets ``allowed``
callables from it.

Invariants:

- only the active coordinator of a group's shard serves its requests; any other broker answers
  NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE while its ZooKeeper session is suspended), and
  ListGroups lists only the groups of its active shards, as a Kafka broker lists the groups it
  coordinates (:mod:`coordinator.shards` routes each group to its shard);
- a group id is of one kind at a time: a JoinGroup for a group with thin-client members, or a
  RegisterConsumer for a classic group with members, is refused with
  INCONSISTENT_GROUP_PROTOCOL; the offsets of an id are shared (one set of znodes);
- an OffsetCommit is answered after the write (fenced by the coordinator epoch); a refused
  partition changes nothing;
- every answer is built from the request alone: a refusal never echoes more than was asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import MetadataStoreError, NoNode
from broker_core.purgatory import Purgatory
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import (
    describe_groups,
    leave_group,
    offset_commit,
    offset_fetch,
)
from broker_core.wire.messages import find_coordinator as find_coordinator_message
from coordinator.classic.group import GroupState
from coordinator.classic.groups import ClassicGroups
from coordinator.classic.interface import ClassicGroupConfig, JoinResult, SyncResult
from coordinator.committer import read_committed_offset
from coordinator.registry import NO_EXTRAS, OffsetExtras

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator.kafka")

#: Most protocol metadata (names and bytes, all protocols) one member may have the coordinator
#: keep: a consumer's subscription is a few kilobytes even for thousands of topics, and every
#: member's is held for the whole life of the generation. More is refused (INVALID_REQUEST).
MAX_MEMBER_METADATA = 1 << 20
#: What ListGroups v5 calls a group of Kafka's classic protocol.
CLASSIC = "classic"

Allowed = Callable[[str], bool]


def _allow_all(_: str) -> bool:
    return True


def find_coordinator(version: int, body: Any, locate: Callable[[str], tuple[int, str]],
                     brokers: Iterable[dict], allowed: Allowed = _allow_all) -> dict:
    """FindCoordinator: for every key (a group id) the principal may DESCRIBE, the address of
    its shard's coordinator. ``locate(group_id)`` is that group's coordinator id and why there
    is none when it is -1 (:meth:`coordinator.shards.CoordinatorShards.coordinator_of`);
    ``brokers`` the live brokers as the request's listener reaches them, built once per
    request. COORDINATOR_NOT_AVAILABLE while none is elected or when the coordinator is not
    on the listener. v4's batched keys are answered each by its own group's shard."""
    addresses = {b["node_id"]: (b["host"], b["port"]) for b in brokers}

    def answer(key: str) -> dict:
        if body.key_type != find_coordinator_message.KEY_TYPE_GROUP:
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": f"key type {body.key_type} is not served: Sluice "
                                     "coordinates groups (key type 0) only"}
        if not allowed(key):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                    "error_message": f"DESCRIBE on group {key} is not allowed"}
        coordinator, unknown = locate(key)
        address = addresses.get(coordinator) if coordinator >= 0 else None
        if address is None:
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    "error_message": unknown if coordinator < 0
                    else "the coordinator is not reachable on this listener"}
        return {"key": key, "node_id": coordinator, "host": address[0],
                "port": address[1], "error_code": 0, "error_message": None}

    keys = find_coordinator_message.keys_of(version, body)
    if version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [answer(k) for k in keys]}
    one = answer(keys[0])
    return {"throttle_time_ms": 0, "error_code": one["error_code"],
            "error_message": one["error_message"], "node_id": one["node_id"],
            "host": one["host"], "port": one["port"]}


class KafkaGroupApis:
    """See the module docstring. ``service`` is the coordinator this serves on."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service
        cfg = service.config
        # Their gauges are exported summed over the broker's shards (coordinator.shards).
        self.heartbeat_purgatory = Purgatory("classic_group_heartbeat", service.clock)
        self.rebalance_purgatory = Purgatory("classic_group_rebalance", service.clock)
        self.groups = ClassicGroups(
            ClassicGroupConfig(min_session_timeout_ms=cfg.min_session_timeout_ms,
                               max_session_timeout_ms=cfg.max_session_timeout_ms,
                               initial_rebalance_delay_ms=cfg.initial_rebalance_delay_ms,
                               max_group_size=cfg.max_group_size),
            heartbeat_purgatory=self.heartbeat_purgatory,
            rebalance_purgatory=self.rebalance_purgatory)

    # -- lifecycle (called by the service) ----------------------------------------------------------

    def resigned(self) -> None:
        """Forget every classic group; waiting joins and syncs are answered NOT_COORDINATOR
        (their clients then find the new coordinator and rejoin)."""
        self.groups.clear()

    def stop(self) -> None:
        self.groups.clear()
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()

    def has_members(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic group with members (or member ids handed out)."""
        g = self.groups.get(group_id)
        return g is not None and bool(g.members or g.pending_members)

    def sweep(self, now: float, grace_s: float) -> None:
        """Drop classic groups that have been Empty for ``grace_s`` (their offsets stay)."""
        for gid in self.groups.expire_empty(now, grace_s):
            log.info("classic group {g} removed after being empty for the grace period", g=gid)

    # -- checks -------------------------------------------------------------------------------------

    def _refusal(self, group_id: str | None = None, *, joining: bool = False) -> ErrorCode | None:
        """The error a group request gets before any state is touched, or None."""
        if not self.service.active:
            return ErrorCode.NOT_COORDINATOR
        if self.service.elector.suspended:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_id is not None:
            try:
                paths.validate_group_id(group_id)
            except ValueError:
                return ErrorCode.INVALID_GROUP_ID
            thin = self.service.registries.groups.get(group_id)
            if joining and thin is not None and thin.members:
                return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    @staticmethod
    def _bad_instance_id(instance_id: str | None, api: str, group_id: str) -> bool:
        """Whether a ``group.instance.id`` breaks Kafka's rules for it (those of a topic name:
        non-empty, at most 249 ASCII letters, digits, '.', '_', '-'); it is kept for the
        member's life, so a hostile one is refused before anything is stored."""
        if instance_id is None:
            return False
        try:
            paths.validate_topic_name(instance_id)
        except ValueError:
            log.info("refused {api} for group {g}: group instance id {i!r} is not valid",
                     api=api, g=group_id, i=instance_id[:300])
            return True
        return False

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------------

    def join_group(self, version: int, body: Any, *, client_id: str,
                   client_host: str) -> defer.Deferred:
        """Fires with the JoinGroup answer: at once for a refusal or a known generation,
        else when the group's next generation forms."""
        d: defer.Deferred = defer.Deferred()

        def respond(r: JoinResult) -> None:
            d.callback({
                "throttle_time_ms": 0, "error_code": int(r.error),
                "generation_id": r.generation_id, "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name if version >= 7 else r.protocol_name or "",
                "leader": r.leader_id, "skip_assignment": False, "member_id": r.member_id,
                "members": [{"member_id": m, "group_instance_id": i, "metadata": meta}
                            for m, i, meta in r.members]})

        refused = self._refusal(body.group_id, joining=True)
        if refused is None and self._bad_instance_id(body.group_instance_id, "JoinGroup",
                                                   body.group_id):
            refused = ErrorCode.INVALID_REQUEST
        size = sum(len(p.name) + len(p.metadata) for p in body.protocols or [])
        if refused is None and size > MAX_MEMBER_METADATA:
            log.info("refused JoinGroup for group {g}: {n} bytes of protocol metadata (at most "
                     "{m})", g=body.group_id, n=size, m=MAX_MEMBER_METADATA)
            refused = ErrorCode.INVALID_REQUEST
        if refused is not None:
            respond(JoinResult(refused, body.member_id))
            return d
        # v0 has no rebalance timeout: the session timeout is used (Kafka's rule).
        rebalance_ms = body.rebalance_timeout_ms
        if version == 0 or rebalance_ms <= 0:
            rebalance_ms = body.session_timeout_ms
        self.groups.join(body.group_id, body.member_id, client_id=client_id,
                         client_host=client_host, session_timeout_ms=body.session_timeout_ms,
                         rebalance_timeout_ms=rebalance_ms,
                         protocol_type=body.protocol_type,
                         protocols=[(p.name, p.metadata) for p in body.protocols or []],
                         require_known_member_id=version >= 4, respond=respond,
                         group_instance_id=body.group_instance_id)
        return d

    def sync_group(self, version: int, body: Any) -> defer.Deferred:
        """Fires with the SyncGroup answer: the member's assignment once the leader sent it."""
        d: defer.Deferred = defer.Deferred()

        def respond(r: SyncResult) -> None:
            d.callback({"throttle_time_ms": 0, "error_code": int(r.error),
                        "protocol_type": r.protocol_type, "protocol_name": r.protocol_name,
                        "assignment": r.assignment})

        refused = self._refusal(body.group_id)
        if refused is None and self._bad_instance_id(body.group_instance_id, "SyncGroup",
                                                   body.group_id):
            refused = ErrorCode.INVALID_REQUEST
        if refused is not None:
            respond(SyncResult(refused))
            return d
        self.groups.sync(body.group_id, body.member_id, body.generation_id,
                         protocol_type=body.protocol_type, protocol_name=body.protocol_name,
                         assignments=[(a.member_id, a.assignment)
                                      for a in body.assignments or []],
                         respond=respond, group_instance_id=body.group_instance_id)
        return d

    def heartbeat(self, version: int, body: Any) -> dict:
        refused = self._refusal(body.group_id)
        if refused is None and self._bad_instance_id(body.group_instance_id, "Heartbeat",
                                                   body.group_id):
            refused = ErrorCode.INVALID_REQUEST
        code = refused if refused is not None else self.groups.heartbeat(
            body.group_id, body.member_id, body.generation_id, body.group_instance_id)
        return {"throttle_time_ms": 0, "error_code": int(code)}

    def leave_group(self, version: int, body: Any) -> dict:
        members = leave_group.members_of(version, body)
        refused = self._refusal(body.group_id)
        if refused is None and any(self._bad_instance_id(i, "LeaveGroup", body.group_id)
                                   for _, i in members):
            refused = ErrorCode.INVALID_REQUEST
        if refused is not None:
            return {"throttle_time_ms": 0, "error_code": int(refused), "members": []}
        error, per_member = self.groups.leave(body.group_id, members)
        if version < 3:
            # One member: its own error is the answer's.
            code = error if error is not ErrorCode.NONE or not per_member else per_member[0]
            return {"throttle_time_ms": 0, "error_code": int(code)}
        return {"throttle_time_ms": 0, "error_code": int(error), "members": [
            {"member_id": m, "group_instance_id": i, "error_code": int(e)}
            for (m, i), e in zip(members, per_member, strict=False)]}

    # -- OffsetCommit ------------------------------------------------------------------------------

    async def offset_commit(self, version: int, body: Any, *, topic_allowed: Allowed,
                            partition_exists: Callable[[str, int], bool]) -> dict:
        """Check the committer (a member of the current generation, or generation -1 for a
        group without members), then each partition (READ on its topic, an existing partition,
        metadata of at most ``offset.metadata.max.bytes`` characters, as Kafka counts it), write
        the accepted offsets with their leader epoch and metadata (fenced) and answer. A commit
        may move an offset backwards (a client that seeked)."""
        refused = self._refusal(body.group_id)
        if refused is None and self._bad_instance_id(body.group_instance_id, "OffsetCommit",
                                                   body.group_id):
            refused = ErrorCode.INVALID_REQUEST
        if refused is None:
            thin = self.service.registries.groups.get(body.group_id)
            if thin is not None and thin.members:
                refused = ErrorCode.UNKNOWN_MEMBER_ID  # a thin-client group: not its member
        if refused is None:
            refused = self.groups.check_commit(body.group_id, body.member_id or "",
                                               body.generation_id_or_member_epoch,
                                               body.group_instance_id)
            if refused is ErrorCode.NONE:
                refused = None
        if refused is not None:
            return {"throttle_time_ms": 0,
                    "topics": offset_commit.every_partition(body, refused)}
        # One answer per entry, in request order (a partition named twice is answered twice;
        # the last accepted entry's offset is the one written).
        codes: list[ErrorCode] = []
        accepted: dict[tuple[str, int], tuple[int, OffsetExtras]] = {}
        max_metadata = self.service.config.offset_metadata_max_bytes
        for t in body.topics or []:
            allowed = topic_allowed(t.name)
            for p in t.partitions or []:
                tp = (t.name, p.partition_index)
                if not allowed:
                    codes.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                elif not partition_exists(*tp):
                    codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif len(p.committed_metadata or "") > max_metadata:
                    codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                else:
                    codes.append(ErrorCode.NONE)
                    # Before v6 there is no epoch (the schema's default, -1); null metadata
                    # is Kafka's "no metadata", kept and answered as "".
                    accepted[tp] = (p.committed_offset, (max(-1, p.committed_leader_epoch),
                                                         p.committed_metadata or ""))
        if accepted:
            failed = await self._write_offsets(body.group_id, accepted)
            if failed is not None:
                codes = [failed if c is ErrorCode.NONE else c for c in codes]
        answers = iter(codes)
        return {"throttle_time_ms": 0, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": int(next(answers))}
                for p in t.partitions or []]} for t in body.topics or []]}

    async def _write_offsets(self, group_id: str,
                             offsets: dict[tuple[str, int], tuple[int, OffsetExtras]]
                             ) -> ErrorCode | None:
        """Write ``offsets`` for ``group_id`` through the coordinator's fenced commit; None,
        or the error every one of them gets."""
        service = self.service
        g = service.registries.group(group_id)
        if not g.members:
            # Offsets only: the group registry goes after the empty-group grace period.
            g.empty_since = service.clock.seconds()
        try:
            # Whether each znode exists decides create or set; learn it once per partition.
            await service.load_committed(g, [tp for tp in offsets if tp not in g.committed])
        except MetadataStoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        for tp, (offset, extras) in offsets.items():
            g.set_offset(tp, offset, extras)
        failed = await service._commit_accepted(g, set(offsets))
        return None if failed is None else ErrorCode(failed["error_code"])

    # -- OffsetFetch -------------------------------------------------------------------------------

    async def offset_fetch(self, version: int, body: Any, *, group_allowed: Allowed,
                           topic_allowed: Allowed) -> dict:
        """Committed offsets of each group asked for (DESCRIBE on the group; partitions of
        topics the principal may not DESCRIBE get TOPIC_AUTHORIZATION_FAILED, or are left out
        of an "every partition" answer); -1 where none is committed."""
        groups = []
        for gid, topics in offset_fetch.groups_of(version, body):
            code = self._refusal(gid)
            if code is None and not group_allowed(gid):
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            answer: list[dict] = []
            if code is None:
                try:
                    answer = await self._fetch_group(gid, topics, topic_allowed)
                except MetadataStoreError:
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            groups.append((gid, topics, int(code or 0), answer))
        if version >= 8:
            return {"throttle_time_ms": 0, "groups": [
                {"group_id": gid, "topics": answer, "error_code": code}
                for gid, _, code, answer in groups]}
        (gid, topics, code, answer) = groups[0]
        if code and version < 2:
            return offset_fetch.error_body(version, body, code)
        return {"throttle_time_ms": 0, "topics": answer, "error_code": code}

    async def _fetch_group(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                           topic_allowed: Allowed) -> list[dict]:
        if topics is None:
            topics = await self._committed_partitions(group_id)
            topics = [(t, ps) for t, ps in topics if topic_allowed(t)]
            denied: set[str] = set()
        else:
            denied = {t for t, _ in topics if not topic_allowed(t)}
        wanted = [(t, p) for t, ps in topics if t not in denied for p in ps]
        offsets = await self._read_offsets(group_id, wanted)
        out = []
        for t, ps in topics:
            parts = []
            for p in ps:
                if t in denied:
                    parts.append({"partition_index": p, "committed_offset": -1,
                                  "committed_leader_epoch": -1, "metadata": "",
                                  "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})
                else:
                    stored = offsets[(t, p)]
                    parts.append({"partition_index": p, "committed_offset": stored.offset,
                                  "committed_leader_epoch": stored.leader_epoch,
                                  "metadata": stored.metadata, "error_code": 0})
            out.append({"name": t, "partitions": parts})
        return out

    async def _committed_partitions(self, group_id: str) -> list[tuple[str, list[int]]]:
        store = self.service.store
        try:
            names = await store.get_children(paths.consumer_offsets(group_id))
        except NoNode:
            return []
        out = []
        for t in sorted(names):
            try:
                children = await store.get_children(paths.consumer_offsets_topic(group_id, t))
            except NoNode:
                continue
            ps = sorted(int(c) for c in children if c.isdigit())
            if ps:
                out.append((t, ps))
        return out

    async def _read_offsets(self, group_id: str, tps: Iterable[tuple[str, int]]
                            ) -> dict[tuple[str, int], paths.CommittedOffset]:
        """The committed offset of each partition with its extras (offset -1: none): what the
        coordinator wrote or read, else read from the store (one batched read)."""
        tps = list(dict.fromkeys(tps))
        g = self.service.registries.groups.get(group_id)
        known = {tp: paths.CommittedOffset(g.committed[tp],
                                           *g.committed_extras.get(tp, NO_EXTRAS))
                 for tp in tps if g is not None and tp in g.committed}
        missing = [tp for tp in tps if tp not in known]
        if missing:
            raw = await self.service.store.get_many(
                [paths.consumer_offset(group_id, *tp) for tp in missing])
            for tp, r in zip(missing, raw, strict=True):
                known[tp] = paths.CommittedOffset(-1) if r is None else \
                    read_committed_offset(group_id, tp, r[0])
        return known

    # -- ListGroups / DescribeGroups ---------------------------------------------------------------

    def list_groups(self, version: int, body: Any, allowed: Allowed = _allow_all) -> dict:
        """The classic groups the principal may DESCRIBE (filtered by state, v4, and type,
        v5). A broker that is not the coordinator lists none, as a Kafka broker that
        coordinates none of the groups."""
        if not self.service.active:
            return {"throttle_time_ms": 0, "error_code": 0, "groups": []}
        if self.service.elector.suspended:
            return {"throttle_time_ms": 0,
                    "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "groups": []}
        states = {s.lower() for s in body.states_filter or []} if version >= 4 else set()
        types = {s.lower() for s in body.types_filter or []} if version >= 5 else set()
        if types and CLASSIC not in types:
            return {"throttle_time_ms": 0, "error_code": 0, "groups": []}
        out = []
        for gid in sorted(self.groups.groups):
            g = self.groups.groups[gid]
            if states and g.state.value.lower() not in states:
                continue
            if not allowed(gid):
                continue
            out.append({"group_id": gid, "protocol_type": g.protocol_type or "",
                        "group_state": g.state.value, "group_type": CLASSIC})
        return {"throttle_time_ms": 0, "error_code": 0, "groups": out}

    def describe_groups(self, version: int, body: Any, allowed: Allowed = _allow_all) -> dict:
        out = []
        for gid in body.groups or []:
            code = self._refusal()
            if code is None and not allowed(gid):
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            g = self.groups.get(gid) if code is None else None
            if g is None or g.is_(GroupState.DEAD):
                out.append(describe_groups.dead_group(gid, int(code or 0)))
                continue
            s = self.groups.summary(g)
            out.append({"error_code": 0, "group_id": gid, "group_state": s.state,
                        "protocol_type": s.protocol_type, "protocol_data": s.protocol_name,
                        "members": [{"member_id": m.member_id,
                                     "group_instance_id": m.group_instance_id,
                                     "client_id": m.client_id, "client_host": m.client_host,
                                     "member_metadata": m.metadata,
                                     "member_assignment": m.assignment} for m in s.members],
                        "authorized_operations": describe_groups.OPERATIONS_NOT_PROVIDED})
        return {"throttle_time_ms": 0, "groups": out}
