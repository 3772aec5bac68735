"""Deleting groups and their offsets on the coordinator: Kafka's DeleteGroups and
OffsetDelete, for both kinds of group (Kafka's classic groups, :mod:`coordinator.kafka_groups`,
and Sluice's thin-client groups, :mod:`coordinator.registry`), whose offsets share the
``/consumers/[group]`` znodes.

ACLs are the broker handler's job (:mod:`broker_core.server.group_apis`); this module gets
``allowed`` callables from it.

Invariants:

- a group is deleted only while it has no members of either kind, no member id handed out,
  no rebalance queued or running and no previous member expected back (else NON_EMPTY_GROUP);
  the check is made again after every wait, just before the write;
- a deletion removes the whole ``/consumers/[group]`` subtree in fenced multis (each behind
  the coordinator-epoch check, children before parents); an OffsetDelete removes only the
  offset znodes of partitions the group does not consume (GROUP_SUBSCRIBED_TO_TOPIC for the
  others);
- both hold the coordinator's commit lock, so no offset write of the group runs at the same
  time; an offset the coordinator held for the deleted partitions (written or still waiting
  to be) is forgotten with them: the delete is ordered after every commit it waited for;
- a refusal changes nothing; a failed write leaves the in-memory state as it was (a retry
  reads the store again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import Delete, MetadataStoreError, NoNode, TransactionFailed
from broker_core.wire import consumer_protocol
from broker_core.wire.errors import ErrorCode, MalformedFrame
from broker_core.wire.messages import offset_delete
from broker_core.wire.topic_partition import TopicPartition
from coordinator import rebalance
from coordinator.classic.group import ClassicGroup, GroupState

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator.deletion")

Allowed = Callable[[str], bool]

#: Kafka's protocol type of consumer groups: their member metadata is a consumer-protocol
#: subscription, so which topics the group consumes is known.
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupDeletion:
    """See the module docstring. ``service`` is the coordinator this serves on."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service

    # -- state --------------------------------------------------------------------------------------

    def _live_classic(self, group_id: str) -> ClassicGroup | None:
        g = self.service.kafka.groups.get(group_id)
        return None if g is None or g.is_(GroupState.DEAD) else g

    def in_use(self, group_id: str) -> bool:
        """Whether ``group_id`` has members (or is about to have them) of either kind."""
        cg = self._live_classic(group_id)
        if cg is not None and (not cg.is_(GroupState.EMPTY) or cg.members
                               or cg.pending_members):
            return True
        g = self.service.registries.groups.get(group_id)
        return g is not None and bool(g.members or g.expected or g.curr_rebalancer is not None
                                      or g.rebalance_initiated)

    def _known(self, group_id: str) -> bool:
        return (self._live_classic(group_id) is not None
                or group_id in self.service.registries.groups)

    async def _subtree(self, root: str) -> list[str]:
        """Every znode at and below ``root``, parents before their children ([] if absent)."""
        store = self.service.store
        out: list[str] = []
        todo = [root]
        while todo:
            path = todo.pop()
            try:
                children = await store.get_children(path)
            except NoNode:
                continue
            out.append(path)
            todo.extend(f"{path}/{c}" for c in sorted(children, reverse=True))
        return out

    def _forget_paths(self, prefix: str) -> None:
        """The coordinator's cache of znodes it created: those under ``prefix`` are gone."""
        ensured = self.service._ensured
        for p in [p for p in ensured if p == prefix or p.startswith(prefix + "/")]:
            ensured.discard(p)

    async def _fenced_delete(self, znodes: list[str]) -> ErrorCode | None:
        """Delete ``znodes`` (children listed after their parents) behind the epoch check."""
        if not znodes:
            return None
        try:
            await self.service.fenced([Delete(p) for p in reversed(znodes)])
        except rebalance.NotCoordinator:
            return ErrorCode.NOT_COORDINATOR
        except (TransactionFailed, MetadataStoreError) as e:
            log.warn("deleting {n} znodes failed: {e}", n=len(znodes), e=e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None

    # -- DeleteGroups -------------------------------------------------------------------------------

    async def delete_groups(self, version: int, body: Any, allowed: Allowed) -> dict:
        """One result per group named, in order: DELETE on the group (``allowed``), this
        broker the coordinator, the group known and without members; then its znodes and its
        in-memory state are removed."""
        results = []
        for gid in body.groups_names or []:
            code = await self._delete_group(gid, allowed)
            results.append({"group_id": gid, "error_code": int(code)})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_group(self, group_id: str, allowed: Allowed) -> ErrorCode:
        if not allowed(group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        service = self.service
        refused = service.kafka._refusal(group_id)
        if refused is not None:
            return refused
        if self.in_use(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        await service._commit_lock.acquire()
        try:
            root = paths.consumer_group(group_id)
            try:
                znodes = await self._subtree(root)
            except MetadataStoreError:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            refused = service.kafka._refusal(group_id)
            if refused is not None:
                return refused
            if self.in_use(group_id):
                return ErrorCode.NON_EMPTY_GROUP
            if not znodes and not self._known(group_id):
                return ErrorCode.GROUP_ID_NOT_FOUND
            failed = await self._fenced_delete(znodes)
            if failed is not None:
                return failed
            self._forget_paths(root)
            self._forget_group(group_id)
        finally:
            service._commit_lock.release()
        log.info("group {g} deleted ({n} znodes)", g=group_id, n=len(znodes))
        return ErrorCode.NONE

    def _forget_group(self, group_id: str) -> None:
        """The group's znodes are gone: drop what the coordinator held of it. A member that
        arrived during the write keeps its group (starting with no offsets)."""
        service = self.service
        service.kafka.groups.remove_group(group_id)
        g = service.registries.groups.get(group_id)
        if g is None:
            return
        g.forget_offsets()
        g.zk_owners = {}
        if not self.in_use(group_id):
            service.registries.forget(group_id)

    # -- OffsetDelete -------------------------------------------------------------------------------

    def _consumed(self, group_id: str) -> tuple[ErrorCode | None, Callable[[str], bool]]:
        """(the whole request's error, or None; whether the group consumes a topic).

        Kafka's rules: an Empty (or only remembered) group consumes nothing; a classic group
        with members consumes its members' subscribed topics when its protocol type is
        "consumer" (all topics while that is not known: no protocol chosen yet, or metadata
        that does not decode), and any other protocol type is NON_EMPTY_GROUP; a thin group
        with members consumes the topics its members subscribe to."""
        cg = self._live_classic(group_id)
        if cg is not None and not cg.is_(GroupState.EMPTY):
            if cg.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return ErrorCode.NON_EMPTY_GROUP, lambda _: True
            topics: set[str] | None = set()
            try:
                for m in cg.members.values():
                    if cg.protocol_name is None:
                        raise MalformedFrame("no protocol chosen yet")
                    topics.update(consumer_protocol.subscribed_topics(
                        m.metadata(cg.protocol_name)))
            except MalformedFrame:
                topics = None
            if topics is None:
                return None, lambda _: True
            return None, topics.__contains__
        g = self.service.registries.groups.get(group_id)
        if g is not None and g.members:
            return None, g.wants
        return None, lambda _: False

    async def offset_delete(self, version: int, body: Any, *, topic_allowed: Allowed,
                            partition_exists: Callable[[str, int], bool]) -> dict:
        """Delete the committed offsets the request names, of partitions the group does not
        consume; each partition needs READ on its topic (``topic_allowed``) and must exist.
        The group's DELETE was checked by the handler."""
        gid = body.group_id
        service = self.service
        refused = service.kafka._refusal(gid)
        if refused is not None:
            return offset_delete.error_body(version, body, int(refused))
        await service._commit_lock.acquire()
        try:
            return await self._offset_delete_locked(version, body, topic_allowed,
                                                    partition_exists)
        finally:
            service._commit_lock.release()

    async def _offset_delete_locked(self, version: int, body: Any, topic_allowed: Allowed,
                                    partition_exists: Callable[[str, int], bool]) -> dict:
        gid = body.group_id
        service = self.service
        try:
            exists = await service.store.exists(paths.consumer_group(gid)) is not None
        except MetadataStoreError:
            return offset_delete.error_body(version, body,
                                            int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        refused = service.kafka._refusal(gid)
        if refused is None and not exists and not self._known(gid):
            refused = ErrorCode.GROUP_ID_NOT_FOUND
        if refused is None:
            refused, consumed = self._consumed(gid)
        if refused is not None:
            return offset_delete.error_body(version, body, int(refused))
        codes: list[ErrorCode] = []
        doomed: list[TopicPartition] = []
        for t in body.topics or []:
            allowed = topic_allowed(t.name)
            for p in t.partitions or []:
                tp = (t.name, p.partition_index)
                if not allowed:
                    codes.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                elif not partition_exists(*tp):
                    codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif consumed(t.name):
                    codes.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                else:
                    codes.append(ErrorCode.NONE)
                    doomed.append(tp)
        doomed = list(dict.fromkeys(doomed))
        failed = await self._delete_offsets(gid, doomed) if doomed else None
        if failed is not None:
            codes = [failed if c is ErrorCode.NONE else c for c in codes]
        answers = iter(codes)
        return {"error_code": 0, "throttle_time_ms": 0, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": int(next(answers))}
                for p in t.partitions or []]} for t in body.topics or []]}

    async def _delete_offsets(self, group_id: str, tps: list[TopicPartition]
                              ) -> ErrorCode | None:
        """Delete the offset znodes of ``tps`` that exist, and forget the coordinator's
        offsets of them; None, or the error every one of them gets."""
        service = self.service
        znodes = [paths.consumer_offset(group_id, *tp) for tp in tps]
        try:
            present = await service.store.get_many(znodes)
        except MetadataStoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        failed = await self._fenced_delete(
            [z for z, r in zip(znodes, present, strict=True) if r is not None])
        if failed is not None:
            return failed
        g = service.registries.groups.get(group_id)
        if g is not None:
            for tp in tps:
                g.forget_offset(tp)
        log.info("deleted the offsets of {n} partitions of group {g}", n=len(tps), g=group_id)
        return None
