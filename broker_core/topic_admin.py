"""Topic administration as metadata-store writes: the one implementation used by the broker's
CreateTopics / DeleteTopics / CreatePartitions handlers, auto-creation, and ``sluice --zookeeper``.

These functions only record intent; the controller carries it out (seed 000 B and H):

- create: ``/config/topics/T`` and ``/brokers/topics/T`` in one multi; the controller's watch on
  ``/brokers/topics`` elects leaders;
- delete: ``/admin/delete_topics/T``; the controller stops the replicas and removes the znodes;
- add partitions: ``/admin/partitions_add/T/P -> [replicas]``; the controller elects leaders,
  updates the assignment and removes the admin nodes;
- remove partitions: ``/admin/partitions_remove/T/P``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_core import assignment as assign
from broker_core.config import ConfigError, validate_topic_config
from broker_core.metadata import Create, NodeExists, NoNode, TransactionFailed
from broker_core.wire.errors import ErrorCode
from broker_core.zk import paths


class TopicAdminError(Exception):
    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class TopicExists(TopicAdminError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class UnknownTopic(TopicAdminError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidPartitions(TopicAdminError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactor(TopicAdminError):
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignment(TopicAdminError):
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfig(TopicAdminError):
    error_code = ErrorCode.INVALID_CONFIG


class InvalidTopic(TopicAdminError):
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    config: dict[str, str] = field(default_factory=dict)
    marked_for_deletion: bool = False


@dataclass(frozen=True)
class ClusterDescription:
    brokers: list[paths.BrokerRegistration]
    controller_id: int | None
    controller_epoch: int | None


async def _children(store: Any, path: str) -> list[str]:
    try:
        return sorted(await store.get_children(path))
    except NoNode:
        return []


async def live_brokers(store: Any) -> dict[int, paths.BrokerRegistration]:
    out = {}
    for bid in await _children(store, paths.BROKER_IDS):
        if not bid.isdigit():
            continue
        try:
            data, _ = await store.get(paths.broker(int(bid)))
        except NoNode:
            continue
        out[int(bid)] = paths.BrokerRegistration.from_bytes(data, int(bid))
    return out


async def _assignment(store: Any, name: str) -> dict[int, list[int]]:
    try:
        data, _ = await store.get(paths.topic(name))
    except NoNode:
        raise UnknownTopic(f"topic {name!r} does not exist") from None
    return paths.TopicAssignment.from_bytes(data).partitions


async def create_topic(store: Any, name: str, num_partitions: int, replication_factor: int,
                       config: Mapping[str, str] | None = None, *,
                       assignment: dict[int, list[int]] | None = None,
                       validate_only: bool = False) -> dict[int, list[int]]:
    try:
        paths.validate_topic_name(name)
    except ValueError as e:
        raise InvalidTopic(str(e)) from None
    try:
        overrides = validate_topic_config(config or {})
    except ConfigError as e:
        raise InvalidConfig(str(e)) from None
    brokers = await live_brokers(store)
    if assignment:
        try:
            assign.validate_manual_assignment(assignment, list(brokers))
        except assign.InvalidReplicaAssignment as e:
            raise InvalidReplicaAssignment(str(e)) from None
        chosen = {int(p): list(r) for p, r in assignment.items()}
    else:
        try:
            chosen = assign.assign_replicas(list(brokers), num_partitions, replication_factor)
        except assign.InvalidPartitions as e:
            raise InvalidPartitions(str(e)) from None
        except assign.InvalidReplicationFactor as e:
            raise InvalidReplicationFactor(str(e)) from None
    if await store.exists(paths.delete_topic(name)) is not None:
        raise TopicExists(f"topic {name!r} is marked for deletion; retry when it is gone")
    if await store.exists(paths.topic(name)) is not None:
        raise TopicExists(f"topic {name!r} already exists")
    if validate_only:
        return chosen
    try:
        await store.multi([
            Create(paths.topic_config(name), paths.TopicConfig(overrides).to_bytes()),
            Create(paths.topic(name), paths.TopicAssignment(chosen).to_bytes()),
        ])
    except TransactionFailed as e:
        if isinstance(e.first_error, NodeExists):
            if await store.exists(paths.topic(name)) is not None:
                raise TopicExists(f"topic {name!r} already exists") from None
            # A stale config node of a deleted topic: replace it.
            await store.delete(paths.topic_config(name))
            return await create_topic(store, name, num_partitions, replication_factor, config,
                                      assignment=assignment)
        raise
    return chosen


async def delete_topic(store: Any, name: str) -> None:
    if await store.exists(paths.topic(name)) is None:
        raise UnknownTopic(f"topic {name!r} does not exist")
    try:
        await store.create(paths.delete_topic(name), b"", makepath=True)
    except NodeExists:
        pass  # already marked: deletion is idempotent


async def add_partitions(store: Any, name: str, new_total: int,
                         assignment: Sequence[Sequence[int]] | None = None,
                         validate_only: bool = False) -> dict[int, list[int]]:
    """Seed 000 H: ask the controller to add partitions up to ``new_total``; returns the new
    partitions' replicas. With ``validate_only`` every check runs and nothing is written."""
    current = await _assignment(store, name)
    if new_total <= len(current):
        raise InvalidPartitions(f"topic {name!r} has {len(current)} partitions; the new count "
                                f"must be larger, got {new_total}")
    if await store.exists(paths.partitions_add_topic(name)) is not None:
        raise InvalidPartitions(f"a partition addition for {name!r} is already in progress")
    brokers = await live_brokers(store)
    rf = len(next(iter(current.values()))) if current else 1
    count = new_total - len(current)
    if assignment:
        if len(assignment) != count:
            raise InvalidReplicaAssignment(f"{count} new partitions need {count} replica lists, "
                                           f"got {len(assignment)}")
        new = {len(current) + i: list(r) for i, r in enumerate(assignment)}
        try:
            assign.validate_manual_assignment(new, list(brokers), first_partition=len(current))
        except assign.InvalidReplicaAssignment as e:
            raise InvalidReplicaAssignment(str(e)) from None
    else:
        try:
            new = assign.assign_replicas(list(brokers), count, rf,
                                         start_partition_id=len(current))
        except assign.InvalidReplicationFactor as e:
            raise InvalidReplicationFactor(str(e)) from None
    if validate_only:
        return new
    import json

    ops = [Create(paths.partitions_add_topic(name))]
    ops += [Create(paths.partition_add(name, p), json.dumps(r, separators=(",", ":")).encode())
            for p, r in sorted(new.items())]
    await store.ensure_path(paths.PARTITIONS_ADD)
    await store.multi(ops)
    return new


async def remove_partitions(store: Any, name: str, partitions: Sequence[int]) -> None:
    current = await _assignment(store, name)
    bad = [p for p in partitions if p not in current]
    if bad:
        raise InvalidPartitions(f"topic {name!r} has no partition(s) {bad}")
    await store.ensure_path(paths.PARTITIONS_REMOVE)
    ops = [Create(paths.partitions_remove_topic(name))]
    ops += [Create(paths.partition_remove(name, p)) for p in sorted(partitions)]
    await store.multi(ops)


async def list_topics(store: Any) -> list[str]:
    return await _children(store, paths.TOPICS)


async def describe_topics(store: Any, names: Sequence[str] | None = None
                          ) -> list[TopicDescription]:
    names = list(names) if names else await list_topics(store)
    deleting = set(await _children(store, paths.DELETE_TOPICS))
    out = []
    for name in names:
        parts = await _assignment(store, name)
        try:
            data, _ = await store.get(paths.topic_config(name))
            config = paths.TopicConfig.from_bytes(data).config
        except NoNode:
            config = {}
        descs = []
        for p, replicas in sorted(parts.items()):
            try:
                data, _ = await store.get(paths.leader_and_isr(name, p))
                st = paths.LeaderAndIsr.from_bytes(data)
                descs.append(PartitionDescription(p, replicas, st.leader, st.leader_epoch,
                                                  st.isr))
            except NoNode:
                descs.append(PartitionDescription(p, replicas, -1, -1, []))
        out.append(TopicDescription(name, descs, config, name in deleting))
    return out


async def describe_cluster(store: Any) -> ClusterDescription:
    brokers = await live_brokers(store)
    try:
        data, _ = await store.get(paths.CONTROLLER)
        controller: int | None = paths.ControllerRegistration.from_bytes(data).broker_id
    except NoNode:
        controller = None
    try:
        data, _ = await store.get(paths.CONTROLLER_EPOCH)
        epoch: int | None = int(data)
    except NoNode:
        epoch = None
    return ClusterDescription([brokers[b] for b in sorted(brokers)], controller, epoch)
