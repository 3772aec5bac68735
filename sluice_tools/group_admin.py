"""Both kinds of consumer group in the admin tools (``sluice groups``): Sluice's thin-client
groups (DescribeConsumerGroups) and Kafka's classic groups (ListGroups, DescribeGroups,
OffsetFetch), listed and described side by side, deleted (DeleteGroups), and their committed
offsets reset as ``kafka-consumer-groups --reset-offsets`` does.

Every group of either kind has one coordinator, and different groups may have different ones,
so every request about a group goes to its own coordinator (found with FindCoordinator); the
requests about several groups are batched per coordinator, and listing every group asks every
live broker for the groups it coordinates and merges the answers. A group id is of one kind at
a time; a Kafka group that committed offsets also has an (empty) registry on the coordinator's
thin side, which is shown only as the Kafka group.

Resetting offsets writes them with OffsetCommit at generation -1 and no member id, which the
coordinator accepts for a group of either kind only while it has no members (a thin group's
offsets live in the same znodes; a thin member that joins later starts from them). The plan
is made first and printed; nothing is written without ``execute``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from broker_core.wire import consumer_protocol
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode, MalformedFrame
from broker_core.wire.topic_partition import TopicPartition
from consumer_client.connection import BrokerConnection, bootstrap
from consumer_client.security import ClientSecurity
from sluice_tools import admin
from sluice_tools.admin import AdminError, GroupDescription, GroupPartition

SLUICE, KAFKA = "sluice", "kafka"
#: Kafka's protocol type whose assignment bytes are the consumer protocol's.
CONSUMER_PROTOCOL_TYPE = "consumer"
_DEAD = "Dead"



@dataclass(frozen=True)
class GroupListing:
    group_id: str
    kind: str  # SLUICE or KAFKA
    state: str
    members: int
    protocol_type: str  # "" for a Sluice group


@dataclass(frozen=True)
class KafkaMember:
    member_id: str
    client_id: str
    host: str
    #: Decoded from the member's assignment (protocol type "consumer"); None when the group
    #: is of another protocol type or the bytes do not decode.
    partitions: list[TopicPartition] | None


@dataclass(frozen=True)
class KafkaGroupDescription:
    """A Kafka group. In ``partitions`` (every partition with a committed offset or assigned),
    ``owner`` is the member id, ``consumer_id`` the member's client id."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator_id: int
    members: list[KafkaMember]
    partitions: list[GroupPartition]


@contextlib.contextmanager
def _coordinator(servers: str, group: str, timeout: float, security: ClientSecurity | None
                 ) -> Iterator[BrokerConnection]:
    """A connection to ``group``'s coordinator."""
    _, host, port = admin.find_coordinator(servers, group, timeout, security)
    with BrokerConnection(host, port, timeout=timeout, security=security) as conn:
        yield conn


def _kafka_groups(conn: BrokerConnection, names: Sequence[str] | None) -> list[Any]:
    """DescribeGroups of ``names`` (None: every group ListGroups lists), without the Dead
    (unknown) ones; an error other than that raises."""
    if names is None:
        resp = conn.request(ApiKey.LIST_GROUPS, {"states_filter": []}, version=4)
        if resp.error_code:
            raise AdminError(resp.error_code, "listing Kafka groups failed")
        names = sorted(g.group_id for g in resp.groups)
    if not names:
        return []
    resp = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": list(names),
                                                 "include_authorized_operations": False},
                        version=5)
    for g in resp.groups:
        if g.error_code:
            raise AdminError(g.error_code, f"group {g.group_id!r}")
    return [g for g in resp.groups if g.group_state != _DEAD]


def _committed(conn: BrokerConnection, group_id: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (OffsetFetch of every partition; -1 ones left out)."""
    resp = conn.request(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": group_id, "topics": None}],
                                              "require_stable": False}, version=8)
    g = resp.groups[0]
    if g.error_code:
        raise AdminError(g.error_code, f"fetching the offsets of group {group_id!r}")
    out = {}
    for t in g.topics:
        for p in t.partitions:
            if p.error_code:
                raise AdminError(p.error_code, f"offset of {t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _assignment(protocol_type: str, raw: bytes) -> list[TopicPartition] | None:
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    try:
        return [(t, p) for t, ps in consumer_protocol.assigned_partitions(bytes(raw))
                for p in ps]
    except MalformedFrame:
        return None


# -- list / describe --------------------------------------------------------------------------


def list_groups(servers: str, timeout: float = 30.0, security: ClientSecurity | None = None
                ) -> list[GroupListing]:
    """Every group of either kind, asked of every live broker (each lists the groups it
    coordinates; a group seen on two, while it moves, is listed once), by id."""
    kafka: dict[str, Any] = {}
    thin: dict[str, Any] = {}
    coordinating = 0
    for _, conn, _ in admin.at_coordinators(servers, None, timeout, security):
        for g in _kafka_groups(conn, None):
            kafka.setdefault(g.group_id, g)
        found = admin.thin_groups_on(conn, None)
        coordinating += found is not None
        for g in found or []:
            thin.setdefault(g.group_id, g)
    if not coordinating:
        raise admin.no_coordinating_broker()
    ids = set(kafka)
    rows = [GroupListing(g.group_id, KAFKA, g.group_state, len(g.members), g.protocol_type)
            for g in kafka.values()]
    rows += [GroupListing(g.group_id, SLUICE, g.state, len(g.members), "")
             for g in thin.values() if not (g.group_id in ids and not g.members)]
    return sorted(rows, key=lambda r: (r.group_id, r.kind))


def describe_groups(servers: str, names: Sequence[str] | None, timeout: float = 30.0,
                    security: ClientSecurity | None = None
                    ) -> list[GroupDescription | KafkaGroupDescription]:
    """Members, assignments, committed offsets and lag of ``names`` (None: every group), each
    of the kind it is; a name of no group raises GROUP_ID_NOT_FOUND."""
    kafka: dict[str, Any] = {}
    thin: dict[str, Any] = {}
    node_of: dict[str, int] = {}
    committed: dict[str, dict[TopicPartition, int]] = {}
    coordinating = 0
    for node_id, conn, batch in admin.at_coordinators(servers, names, timeout, security):
        here_kafka = {g.group_id: g for g in _kafka_groups(conn, batch)
                      if g.group_id not in node_of}
        found = admin.thin_groups_on(conn, batch)
        coordinating += found is not None
        here_thin = {g.group_id: g for g in found or []
                     if g.group_id not in node_of
                     and not (g.group_id in here_kafka and not g.members)}
        for gid in here_kafka:
            committed[gid] = _committed(conn, gid)
        for gid in (*here_kafka, *here_thin):
            node_of[gid] = node_id
        kafka.update(here_kafka)
        thin.update(here_thin)
    if names is None and not coordinating:
        raise admin.no_coordinating_broker()
    wanted = sorted(node_of) if names is None else list(names)
    for name in wanted:
        if name not in node_of:
            raise AdminError(int(ErrorCode.GROUP_ID_NOT_FOUND), f"group {name!r}")
    members = {gid: [KafkaMember(m.member_id, m.client_id, m.client_host,
                                 _assignment(g.protocol_type, m.member_assignment))
                     for m in g.members] for gid, g in kafka.items()}
    tps = admin.thin_group_partitions([thin[n] for n in wanted if n in thin])
    for gid in committed:
        tps.update(committed[gid])
        tps.update(tp for m in members[gid] for tp in m.partitions or [])
    hws = admin.partition_offsets(servers, tps, admin.LATEST_TIMESTAMP, timeout, security)
    out: list[GroupDescription | KafkaGroupDescription] = []
    for name in wanted:
        if name in kafka:
            out.append(_kafka_description(node_of[name], kafka[name], members[name],
                                          committed[name], hws))
        else:
            out.extend(admin.thin_group_descriptions(node_of[name], [thin[name]], hws))
    return out


def _kafka_description(node_id: int, g: Any, members: list[KafkaMember],
                       committed: Mapping[TopicPartition, int],
                       hws: Mapping[TopicPartition, int]) -> KafkaGroupDescription:
    owner = {tp: m for m in members for tp in m.partitions or []}
    parts = []
    for tp in sorted(set(committed) | set(owner)):
        m = owner.get(tp)
        parts.append(GroupPartition(tp[0], tp[1], committed.get(tp), hws.get(tp),
                                    None if m is None else m.member_id,
                                    None if m is None else m.client_id,
                                    None if m is None else m.host))
    return KafkaGroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                                 node_id, sorted(members, key=lambda m: m.member_id), parts)


# -- delete -----------------------------------------------------------------------------------


def delete_groups(servers: str, names: Sequence[str], timeout: float = 30.0,
                  security: ClientSecurity | None = None) -> list[tuple[str, int]]:
    """DeleteGroups: ``(group, error code)`` per name, in order (0: deleted), each asked of
    its coordinator (one request per coordinator for the groups it coordinates)."""
    codes: dict[str, int] = {}
    for _, conn, batch in admin.at_coordinators(servers, names, timeout, security):
        resp = conn.request(ApiKey.DELETE_GROUPS, {"groups_names": batch}, version=2)
        codes.update((r.group_id, r.error_code) for r in resp.results if r.group_id in batch)
    return [(n, codes.get(n, int(ErrorCode.UNKNOWN_SERVER_ERROR)))
            for n in dict.fromkeys(names)]


# -- reset offsets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResetSpec:
    """Where to move each offset: exactly one of these is set."""

    to_earliest: bool = False
    to_latest: bool = False
    to_offset: int | None = None
    shift_by: int | None = None
    to_datetime: str | None = None


@dataclass(frozen=True)
class PlannedReset:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


def parse_datetime_ms(text: str) -> int:
    """An ISO 8601 date-time as milliseconds since the epoch; one without a zone is UTC
    (kafka-consumer-groups would take the local zone: a command's meaning should not depend
    on the machine it runs on)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not an ISO 8601 date-time "
                         "(e.g. 2026-01-31T12:00:00 or 2026-01-31T12:00:00+01:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_topic_partitions(specs: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """``T`` (every partition) or ``T:P,P,...`` per spec."""
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise ValueError(f"--topic {spec!r}: no topic name")
        if not sep:
            out.append((topic, None))
            continue
        try:
            ps = sorted({int(p) for p in parts.split(",")})
        except ValueError:
            raise ValueError(f"--topic {spec!r}: partitions must be numbers, as T:0,1,2") \
                from None
        if not ps or ps[0] < 0:
            raise ValueError(f"--topic {spec!r}: partitions must be numbers >= 0")
        out.append((topic, ps))
    return out


def _active_members(conn: BrokerConnection, group_id: str) -> tuple[str, int] | None:
    """(kind, member count) of ``group_id`` when it has members, else None."""
    kafka = _kafka_groups(conn, [group_id])
    if kafka and kafka[0].members:
        return KAFKA, len(kafka[0].members)
    thin = admin.thin_groups_on(conn, [group_id]) or []
    if thin and thin[0].members:
        return SLUICE, len(thin[0].members)
    return None


def _partitions(servers: str, topics: list[tuple[str, list[int] | None]], timeout: float,
                security: ClientSecurity | None) -> list[TopicPartition]:
    with bootstrap(servers, timeout=timeout, security=security) as conn:
        md = admin.AdminClient._metadata_on(conn, sorted({t for t, _ in topics}))
    known = {t.name: sorted(p.partition_index for p in t.partitions) for t in md.topics
             if t.error_code == 0}
    out: list[TopicPartition] = []
    for topic, ps in topics:
        if topic not in known:
            raise AdminError(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                             f"topic {topic!r} does not exist")
        missing = sorted(set(ps or []) - set(known[topic]))
        if missing:
            raise AdminError(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                             f"topic {topic!r} has no partition {missing[0]}")
        out.extend((topic, p) for p in (known[topic] if ps is None else ps))
    return sorted(set(out))


def reset_offsets(servers: str, group_id: str, topics: list[tuple[str, list[int] | None]],
                  spec: ResetSpec, *, execute: bool, timeout: float = 30.0,
                  security: ClientSecurity | None = None) -> list[PlannedReset]:
    """The new offset of every partition named (clamped to the partition's log start and
    high watermark, as Kafka's tool does); written (OffsetCommit, generation -1) only when
    ``execute``. Refused while the group has members."""
    with _coordinator(servers, group_id, timeout, security) as conn:
        active = _active_members(conn, group_id)
        if active is not None:
            kind, n = active
            raise AdminError(None, f"group {group_id!r} ({kind}) has {n} active member"
                             f"{'s' if n != 1 else ''}: offsets can be reset only while the "
                             "group has none (stop its consumers first)")
        current = _committed(conn, group_id)
    tps = _partitions(servers, topics, timeout, security)
    want = set(tps)
    earliest = admin.partition_offsets(servers, want, admin.EARLIEST_TIMESTAMP, timeout,
                                       security)
    latest = admin.partition_offsets(servers, want, admin.LATEST_TIMESTAMP, timeout, security)
    at_time = (admin.partition_offsets(servers, want, parse_datetime_ms(spec.to_datetime),
                                       timeout, security)
               if spec.to_datetime is not None else {})
    plan = []
    for tp in tps:
        if tp not in earliest or tp not in latest:
            raise AdminError(int(ErrorCode.LEADER_NOT_AVAILABLE),
                             f"the offsets of {tp[0]}-{tp[1]} are not available (no leader)")
        low, high = earliest[tp], latest[tp]
        if spec.to_earliest:
            target = low
        elif spec.to_latest:
            target = high
        elif spec.to_offset is not None:
            target = spec.to_offset
        elif spec.shift_by is not None:
            if tp not in current:
                raise AdminError(None, f"{tp[0]}-{tp[1]} has no committed offset in group "
                                 f"{group_id!r} to shift")
            target = current[tp] + spec.shift_by
        else:
            # No message at or after the time: the end, as Kafka's tool does.
            target = at_time.get(tp, -1)
            if target < 0:
                target = high
        plan.append(PlannedReset(tp[0], tp[1], current.get(tp), min(max(target, low), high)))
    if execute and plan:
        _commit(servers, group_id, plan, timeout, security)
    return plan


def _commit(servers: str, group_id: str, plan: list[PlannedReset], timeout: float,
            security: ClientSecurity | None) -> None:
    topics: dict[str, list[dict]] = {}
    for r in plan:
        topics.setdefault(r.topic, []).append(
            {"partition_index": r.partition, "committed_offset": r.new_offset,
             "committed_leader_epoch": -1, "committed_metadata": None})
    with _coordinator(servers, group_id, timeout, security) as conn:
        resp = conn.request(ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, version=8)
    failed = [(t.name, p.partition_index, p.error_code) for t in resp.topics
              for p in t.partitions if p.error_code]
    if failed:
        t, p, code = failed[0]
        hint = (" (the group has members again)" if code == ErrorCode.UNKNOWN_MEMBER_ID
                else "")
        raise AdminError(code, f"resetting {t}-{p} of group {group_id!r} failed{hint}; "
                         f"{len(failed)} of {len(plan)} partitions not written")
