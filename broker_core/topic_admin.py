"""Topic administration as metadata-store writes: the one implementation used by the broker's
CreateTopics / DeleteTopics / CreatePartitions handlers, auto-creation, and ``sluice --zookeeper``.

These functions only record intent; the controller carries it out (docs/design.md):

- create: ``/config/topics/T`` and ``/brokers/topics/T`` in one multi; the controller's watch on
  ``/brokers/topics`` elects leaders;
- delete: ``/admin/delete_topics/T``; the controller stops the replicas and removes the znodes;
- add partitions: ``/admin/partitions_add/T/P -> [replicas]``; the controller elects leaders,
  updates the assignment and removes the admin nodes;
- remove partitions: ``/admin/partitions_remove/T/P``;
- reassign replicas: ``/admin/reassign_partitions`` (Kafka's JSON); the controller moves each
  partition and shrinks the znode, deleting it when the last one is done; cancel
  rewrites a partition's target to its original replicas;
- preferred-leader election: ``/admin/preferred_replica_election``; the controller moves
  leadership to each partition's first replica where it can and deletes the znode; marked
  ``"election":"unclean"`` (ElectLeaders UNCLEAN) it gives each leaderless partition a live
  replica instead, outside the ISR if need be.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_core import assignment as assign
from broker_core import metadata_paths as paths
from broker_core.config.parsing import ConfigError
from broker_core.config.topic_keys import validate_topic_config
from broker_core.metadata import (
    BadVersion,
    Create,
    NodeExists,
    NoNode,
    SessionState,
    TransactionFailed,
)
from broker_core.wire.errors import ErrorCode
from broker_core.wire.topic_partition import TopicPartition


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


class ReassignmentInProgress(TopicAdminError):
    error_code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class NoReassignmentInProgress(TopicAdminError):
    error_code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class AdminRequestPending(TopicAdminError):
    """An earlier request of the same kind is still waiting for the controller."""

    error_code = ErrorCode.INVALID_REQUEST


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
        if not (bid.isdigit() and bid.isascii()):
            continue
        try:
            data, _ = await store.get(paths.broker(int(bid)))
        except NoNode:
            continue
        out[int(bid)] = paths.BrokerRegistration.from_bytes(data, int(bid))
    return out


async def _assignment(store: Any, name: str) -> dict[int, list[int]]:
    """The topic's replicas per partition; UnknownTopic for a name no topic can have (never
    made into a store path: a peer's ``..`` or ``a/b`` is not a topic) or no topic has."""
    try:
        paths.validate_topic_name(name)
    except ValueError:
        raise UnknownTopic(f"topic {name!r} does not exist") from None
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
    """Ask the controller to add partitions up to ``new_total``; returns the new
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
    """A Sluice addition: ask the controller to remove ``partitions`` of ``name``.

    Refused here with :class:`InvalidPartitions` (the controller checks the same again, as anyone
    may write the request znodes): no partition named, a partition named twice or not an int, a
    partition the topic does not have, partitions other than the highest-numbered ones, all of
    them (delete the topic instead), or a removal for the topic already pending. The controller
    then stops the partitions' replicas (StopReplica, deleting their data) and only then removes
    them from the metadata store."""
    if not partitions:
        raise InvalidPartitions("no partitions to remove were named")
    if any(isinstance(p, bool) or not isinstance(p, int) for p in partitions):
        raise InvalidPartitions(f"partition numbers must be integers, got {list(partitions)}")
    wanted = sorted(set(partitions))
    if len(wanted) != len(partitions):
        raise InvalidPartitions(f"a partition is named twice in {list(partitions)}")
    current = await _assignment(store, name)
    bad = [p for p in wanted if p not in current]
    if bad:
        raise InvalidPartitions(f"topic {name!r} has no partition(s) {bad}")
    if len(wanted) >= len(current):
        raise InvalidPartitions(f"topic {name!r} must keep at least one partition (delete the "
                                "topic instead)")
    if wanted != list(range(len(current) - len(wanted), len(current))):
        raise InvalidPartitions(f"only the highest-numbered partitions of {name!r} can be "
                                f"removed (it has {len(current)}), not {wanted}")
    pending = InvalidPartitions(f"a partition removal for {name!r} is already in progress")
    if await store.exists(paths.partitions_remove_topic(name)) is not None:
        raise pending
    await store.ensure_path(paths.PARTITIONS_REMOVE)
    ops = [Create(paths.partitions_remove_topic(name))]
    ops += [Create(paths.partition_remove(name, p)) for p in wanted]
    try:
        await store.multi(ops)
    except TransactionFailed as e:
        if isinstance(e.first_error, NodeExists):
            raise pending from None  # another request got there between the check and now
        raise


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


# -- replica reassignment (docs/design.md#replica-reassignment) -----------------------------------


#: What ``verify_reassignment`` reports per partition.
REASSIGNMENT_IN_PROGRESS = "in progress"
REASSIGNMENT_COMPLETE = "complete"
REASSIGNMENT_FAILED = "failed"


def parse_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    """A ``--reassignment-json-file`` (Kafka's format, the value of
    ``/admin/reassign_partitions``): partition -> new replicas. Raises
    :class:`InvalidReplicaAssignment` saying what is wrong."""
    try:
        proposal = paths.PartitionReassignment.from_bytes(data).partitions
    except ValueError as e:
        raise InvalidReplicaAssignment(str(e)) from None
    if not proposal:
        raise InvalidReplicaAssignment("the reassignment names no partitions")
    return proposal


async def _pending_reassignment(store: Any) -> tuple[dict[TopicPartition, list[int]], int]:
    try:
        data, stat = await store.get(paths.REASSIGN_PARTITIONS)
    except NoNode:
        return {}, -1
    return paths.PartitionReassignment.from_bytes(data).partitions, stat.version


def _check_target(tp: TopicPartition, replicas: Sequence[int], brokers: Mapping[int, Any],
                  assignment: Mapping[int, list[int]]) -> None:
    """Why ``replicas`` cannot be ``tp``'s new replica list (raised), in Kafka's order: an
    unknown partition, an empty list, a broker named twice, a broker that is not alive."""
    topic, p = tp
    if p not in assignment:
        raise UnknownTopic(f"topic {topic!r} has no partition {p}")
    if not replicas:
        raise InvalidReplicaAssignment(f"{topic}-{p}: the replica list is empty")
    if len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignment(
            f"{topic}-{p}: the replica list {list(replicas)} names a broker twice")
    unknown = [b for b in replicas if b not in brokers]
    if unknown:
        raise InvalidReplicaAssignment(
            f"{topic}-{p}: brokers {unknown} are not alive (live brokers: "
            f"{', '.join(map(str, sorted(brokers))) or 'none'})")


async def validate_reassignment(store: Any, proposal: Mapping[TopicPartition, Sequence[int]]
                                ) -> dict[TopicPartition, list[int]]:
    """Check a proposal against the cluster; returns the current replicas of each partition.

    Refused: an unknown topic or partition, an empty replica list, a broker named twice, a
    broker id that is not a live broker. A replication factor other than the current one is
    allowed (as in Kafka)."""
    brokers = await live_brokers(store)
    current: dict[TopicPartition, list[int]] = {}
    assignments: dict[str, dict[int, list[int]]] = {}
    for (topic, p), replicas in sorted(proposal.items()):
        if topic not in assignments:
            assignments[topic] = await _assignment(store, topic)
        _check_target((topic, p), replicas, brokers, assignments[topic])
        current[(topic, p)] = list(assignments[topic][p])
    return current


async def execute_reassignment(store: Any, proposal: Mapping[TopicPartition, Sequence[int]]
                               ) -> dict[TopicPartition, list[int]]:
    """Validate and write ``/admin/reassign_partitions``; returns the current replicas (what an
    admin keeps to roll back). Refused while another reassignment is in progress (Kafka's
    rule for this znode: its writer would race the controller that shrinks it)."""
    current = await validate_reassignment(store, proposal)
    value = paths.PartitionReassignment({tp: list(r) for tp, r in proposal.items()}).to_bytes()
    try:
        await store.create(paths.REASSIGN_PARTITIONS, value, makepath=True)
    except NodeExists:
        pending, _ = await _pending_reassignment(store)
        names = ", ".join(f"{t}-{p}" for t, p in sorted(pending)) or "?"
        raise ReassignmentInProgress(
            f"a partition reassignment is in progress ({names}); follow it with --verify or "
            "stop it with --cancel") from None
    return current


async def verify_reassignment(store: Any, proposal: Mapping[TopicPartition, Sequence[int]]
                              ) -> dict[TopicPartition, str]:
    """Per partition of ``proposal``: in progress (still in the admin znode), complete (its
    replicas are the proposed ones) or failed (neither: rejected by the controller, cancelled,
    or the topic is gone)."""
    pending, _ = await _pending_reassignment(store)
    out: dict[TopicPartition, str] = {}
    for (topic, p), replicas in sorted(proposal.items()):
        if (topic, p) in pending:
            out[(topic, p)] = REASSIGNMENT_IN_PROGRESS
            continue
        try:
            now = (await _assignment(store, topic)).get(p)
        except UnknownTopic:
            now = None
        out[(topic, p)] = (REASSIGNMENT_COMPLETE if now == list(replicas)
                           else REASSIGNMENT_FAILED)
    return out


async def cancel_reassignment(store: Any, partitions: Sequence[TopicPartition]
                              ) -> list[TopicPartition]:
    """Revert the named partitions that are still being reassigned to their original replicas
    (AR minus the replicas being added, from the topic znode); returns those cancelled. The
    controller then shrinks AR back and stops the added replicas. Conditional on the admin
    znode's version: a write by the controller in between makes us read again."""
    for _ in range(10):
        try:
            data, stat = await store.get(paths.REASSIGN_PARTITIONS)
        except NoNode:
            return []
        pending = paths.PartitionReassignment.from_bytes(data).partitions
        cancelled = [tp for tp in partitions if tp in pending]
        if not cancelled:
            return []
        for topic, p in cancelled:
            try:
                raw, _ = await store.get(paths.topic(topic))
            except NoNode:
                continue
            value = paths.TopicAssignment.from_bytes(raw)
            adding = value.adding.get(p, [])
            pending[(topic, p)] = [b for b in value.partitions.get(p, []) if b not in adding]
        try:
            await store.set(paths.REASSIGN_PARTITIONS,
                            paths.PartitionReassignment(pending).to_bytes(), stat.version)
        except (BadVersion, NoNode):
            continue
        return cancelled
    raise ReassignmentInProgress("the reassignment kept changing while cancelling; try again")


@dataclass(frozen=True)
class OngoingReassignment:
    """One partition being reassigned (ListPartitionReassignments): its current replicas (the
    original and the target together once the controller has started), those being added and
    those that will be removed."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


async def alter_reassignments(store: Any,
                              changes: Mapping[TopicPartition, Sequence[int] | None], *,
                              allow_replication_factor_change: bool = True
                              ) -> dict[TopicPartition, TopicAdminError | None]:
    """KIP-455's AlterPartitionReassignments through ``/admin/reassign_partitions``: per
    partition, a new target (``None``: cancel), and per partition the error it got (``None``:
    accepted). Unlike :func:`execute_reassignment` (the whole-file tool), a request joins an
    ongoing reassignment: a partition's latest target replaces an earlier one, as in Kafka.

    Every partition is checked before anything is written (:func:`_check_target`; a
    cancellation of a partition not being reassigned is ``NO_REASSIGNMENT_IN_PROGRESS``), and
    the valid ones are written together, conditional on the admin znode's version (the
    controller shrinks it as partitions complete), so a refused partition changes nothing.
    Without ``allow_replication_factor_change`` (KIP-860) a target whose size differs from the
    partition's replicas before any reassignment began is INVALID_REPLICATION_FACTOR."""
    brokers = await live_brokers(store)
    assignments: dict[str, dict[int, list[int]] | None] = {}
    results: dict[TopicPartition, TopicAdminError | None] = {}
    targets: dict[TopicPartition, list[int]] = {}
    cancels: list[TopicPartition] = []
    for tp, replicas in sorted(changes.items(), key=lambda kv: kv[0]):
        topic, p = tp
        if topic not in assignments:
            try:
                assignments[topic] = await _assignment(store, topic)
            except UnknownTopic:
                assignments[topic] = None
        assignment = assignments[topic]
        try:
            if assignment is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
            if replicas is None:
                if p not in assignment:
                    raise UnknownTopic(f"topic {topic!r} has no partition {p}")
                cancels.append(tp)
            else:
                _check_target(tp, replicas, brokers, assignment)
                if not allow_replication_factor_change:
                    current = len(await _original_replicas(store, tp))
                    if len(replicas) != current:
                        raise InvalidReplicationFactor(
                            f"{topic}-{p}: the target has {len(replicas)} replicas, the "
                            f"partition {current}, and the request does not allow a change "
                            "of replication factor")
                targets[tp] = list(replicas)
            results[tp] = None
        except TopicAdminError as e:
            results[tp] = e
    if not targets and not cancels:
        return results
    for _ in range(10):
        pending, version = await _pending_reassignment(store)
        wanted = dict(pending)
        for tp in cancels:
            if tp not in pending:
                results[tp] = NoReassignmentInProgress(
                    f"{tp[0]}-{tp[1]} is not being reassigned")
                continue
            wanted[tp] = await _original_replicas(store, tp)
        wanted.update(targets)
        if wanted == pending:
            return results
        value = paths.PartitionReassignment(wanted).to_bytes()
        try:
            if version < 0:
                await store.create(paths.REASSIGN_PARTITIONS, value, makepath=True)
            else:
                await store.set(paths.REASSIGN_PARTITIONS, value, version)
        except (NodeExists, BadVersion, NoNode):
            for tp in cancels:
                results[tp] = None
            continue  # the controller (or another admin) wrote in between: read again
        return results
    raise ReassignmentInProgress("the reassignment kept changing while it was being altered; "
                                 "try again")


async def _original_replicas(store: Any, tp: TopicPartition) -> list[int]:
    """A partition's replicas before its reassignment started: AR minus the replicas it adds
    (from the topic znode; before the controller starts, that is AR itself)."""
    try:
        raw, _ = await store.get(paths.topic(tp[0]))
    except NoNode:
        return []
    value = paths.TopicAssignment.from_bytes(raw)
    adding = value.adding.get(tp[1], [])
    return [b for b in value.partitions.get(tp[1], []) if b not in adding]


async def list_reassignments(store: Any, partitions: Sequence[TopicPartition] | None = None
                             ) -> dict[TopicPartition, OngoingReassignment]:
    """The reassignments in progress (of ``partitions``, or all): each partition's replicas
    from its topic znode, with the replicas being added and removed (from the controller's
    ``adding_replicas`` / ``removing_replicas`` once it has started, else from the target)."""
    pending, _ = await _pending_reassignment(store)
    wanted = set(partitions) if partitions is not None else None
    out: dict[TopicPartition, OngoingReassignment] = {}
    topics: dict[str, paths.TopicAssignment | None] = {}
    for tp, target in sorted(pending.items()):
        if wanted is not None and tp not in wanted:
            continue
        topic, p = tp
        if topic not in topics:
            try:
                raw, _ = await store.get(paths.topic(topic))
                topics[topic] = paths.TopicAssignment.from_bytes(raw)
            except NoNode:
                topics[topic] = None
        value = topics[topic]
        if value is None or p not in value.partitions:
            continue  # the topic went away; the controller drops the entry
        replicas = value.partitions[p]
        adding = value.adding.get(p) or [b for b in target if b not in replicas]
        removing = value.removing.get(p) or [b for b in replicas if b not in target]
        out[tp] = OngoingReassignment(list(replicas), list(adding), list(removing))
    return out


# -- preferred-leader election -----------------------------------------------------------------

#: Outcomes of ``elect_preferred_leaders`` per partition.
ELECTED = "elected"
ELECTION_NOT_NEEDED = "not needed"


async def all_partitions(store: Any) -> list[TopicPartition]:
    out = []
    for topic in await list_topics(store):
        try:
            out += [(topic, p) for p in sorted(await _assignment(store, topic))]
        except UnknownTopic:
            continue
    return out


async def elect_preferred_leaders(store: Any, partitions: Sequence[TopicPartition], *,
                                  timeout_s: float = 30.0, clock: Any = None
                                  ) -> dict[TopicPartition, str]:
    """Ask the controller (``/admin/preferred_replica_election``) to give each partition to its
    preferred replica, wait until it has acted (the znode is gone), and report per partition:
    ``ELECTED``, ``ELECTION_NOT_NEEDED`` (the preferred replica leads already), or an error
    ``"CODE: why"`` (unknown partition; preferred replica not alive or not in the ISR)."""
    brokers = await live_brokers(store)
    out: dict[TopicPartition, str] = {}
    ask: dict[TopicPartition, int] = {}
    async for tp, replicas, state in _partition_states(store, partitions):
        if not replicas:
            out[tp] = f"UNKNOWN_TOPIC_OR_PARTITION: {tp[0]}-{tp[1]} does not exist"
            continue
        preferred = replicas[0]
        if state is not None and state.leader == preferred:
            out[tp] = ELECTION_NOT_NEEDED
        elif preferred not in brokers or state is None or preferred not in state.isr:
            out[tp] = (f"PREFERRED_LEADER_NOT_AVAILABLE: preferred replica {preferred} is "
                       "not alive or not in the ISR")
        else:
            ask[tp] = preferred
    if not ask:
        return out
    await _ask_for_election(store, paths.PreferredReplicaElection(sorted(ask)), timeout_s,
                            clock)
    for tp, preferred in ask.items():
        state = await _leader_state(store, tp)
        out[tp] = ELECTED if state is not None and state.leader == preferred else (
            f"PREFERRED_LEADER_NOT_AVAILABLE: preferred replica {preferred} could not take "
            "over (not alive or not in the ISR when the controller acted)")
    return out


async def _partition_states(store: Any, partitions: Sequence[TopicPartition]
                            ) -> AsyncIterator[tuple[TopicPartition, list[int] | None,
                                                     paths.LeaderAndIsr | None]]:
    """Each partition with its replicas (``None`` when the topic or partition does not exist)
    and its leader state, reading each topic's assignment once however many of its
    partitions are asked about."""
    assignments: dict[str, dict[int, list[int]] | None] = {}
    for tp in partitions:
        topic, p = tp
        if topic not in assignments:
            try:
                assignments[topic] = await _assignment(store, topic)
            except UnknownTopic:
                assignments[topic] = None
        replicas = (assignments[topic] or {}).get(p)
        yield tp, replicas, (await _leader_state(store, tp) if replicas else None)


async def _leader_state(store: Any, tp: TopicPartition) -> paths.LeaderAndIsr | None:
    try:
        data, _ = await store.get(paths.leader_and_isr(*tp))
    except NoNode:
        return None
    return paths.LeaderAndIsr.from_bytes(data)


async def elect_unclean_leaders(store: Any, partitions: Sequence[TopicPartition], *,
                                timeout_s: float = 30.0, clock: Any = None
                                ) -> dict[TopicPartition, str]:
    """ElectLeaders' UNCLEAN type (KIP-460): ask the controller (the
    ``/admin/preferred_replica_election`` document marked unclean) to give each partition
    without a live leader a live replica, outside the ISR if need be, whatever the topic's
    ``unclean.leader.election.enable``; wait until it has acted, and report per partition:
    ``ELECTED``, ``ELECTION_NOT_NEEDED`` (its leader is alive), or an error ``"CODE: why"``
    (unknown partition; ``ELIGIBLE_LEADERS_NOT_AVAILABLE``: no replica is alive)."""
    brokers = await live_brokers(store)
    out: dict[TopicPartition, str] = {}
    ask: list[TopicPartition] = []
    async for tp, replicas, state in _partition_states(store, partitions):
        if not replicas:
            out[tp] = f"UNKNOWN_TOPIC_OR_PARTITION: {tp[0]}-{tp[1]} does not exist"
        elif state is not None and state.leader in brokers:
            out[tp] = ELECTION_NOT_NEEDED
        elif not any(b in brokers for b in replicas):
            out[tp] = (f"ELIGIBLE_LEADERS_NOT_AVAILABLE: no replica of {tp[0]}-{tp[1]} "
                       f"({', '.join(map(str, replicas))}) is alive")
        else:
            ask.append(tp)
    if not ask:
        return out
    await _ask_for_election(store, paths.PreferredReplicaElection(sorted(ask), unclean=True),
                            timeout_s, clock)
    brokers = await live_brokers(store)
    for tp in ask:
        state = await _leader_state(store, tp)
        out[tp] = ELECTED if state is not None and state.leader in brokers else (
            "ELIGIBLE_LEADERS_NOT_AVAILABLE: no replica could take over (none was alive and "
            "eligible when the controller acted)")
    return out


async def _ask_for_election(store: Any, request: paths.PreferredReplicaElection,
                            timeout_s: float, clock: Any) -> None:
    """Write ``request`` for the controller and wait until it has acted (deleted it).
    Raises :class:`AdminRequestPending` when another election is pending, and
    :class:`TopicAdminError` when the controller does not act within ``timeout_s`` (the
    request is left for it) or the store's session is lost."""
    from twisted.internet import task

    if clock is None:
        from twisted.internet import reactor as clock
    try:
        await store.create(paths.PREFERRED_REPLICA_ELECTION, request.to_bytes(), makepath=True)
    except NodeExists:
        raise AdminRequestPending("a leader election is already in progress "
                                  f"({paths.PREFERRED_REPLICA_ELECTION} exists)") from None
    deadline = clock.seconds() + timeout_s
    while await store.exists(paths.PREFERRED_REPLICA_ELECTION) is not None:
        if clock.seconds() > deadline or getattr(store, "state",
                                                  SessionState.CONNECTED) is SessionState.LOST:
            raise TopicAdminError(f"the controller did not act on the election within "
                                  f"{timeout_s:g}s; is a controller running? "
                                  f"({paths.PREFERRED_REPLICA_ELECTION} is left for it)")
        await task.deferLater(clock, 0.1, lambda: None)
