"""Kafka's cluster administration APIs on a broker's client listeners: DeleteRecords (21),
DescribeLogDirs (35), ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46) and DescribeCluster (60).

Reassignments and elections are requests to the controller written through the broker's own
metadata store (:mod:`broker_core.topic_admin`, the same functions ``sluice reassign
--zookeeper`` uses), so they work alike in ZooKeeper and quorum mode and whichever broker is
asked. DeleteRecords and DescribeLogDirs are answered from this broker's replicas (Kafka's admin
clients send them to each partition's leader and to each broker).

Invariants: every partition of a request is validated before anything is written, and a
refused partition changes nothing; a request naming more than :data:`MAX_PARTITIONS`
partitions is refused whole (each is a metadata-store read). The authorization rules are in
:mod:`broker_core.server.authorization`; DeleteRecords checks DELETE per topic here.

AlterPartitionReassignments is also served by the metadata quorum's listener, where it means
a change of voters (:mod:`broker_core.raft.listener_admin`): a different listener with a
different handler; this class never sees a request of the quorum listener.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from typing import Any

from twisted.logger import Logger

from broker_core import topic_admin
from broker_core.server.authorization import RULES, Access, cluster_authorized_operations
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import elect_leaders
from broker_core.wire.topic_partition import TopicPartition

#: Most partitions one request may name (beyond it: INVALID_REQUEST for all of them).
MAX_PARTITIONS = 10_000
#: Longest an ElectLeaders request waits for the controller, whatever its ``timeout_ms`` says
#: (the wait polls the metadata store; a peer must not keep that going for days).
MAX_ELECTION_WAIT_S = 300.0



def _count(topics: Iterable[Any] | None, partitions_of: Callable[[Any], Any]) -> int:
    return 0 if topics is None else sum(len(partitions_of(t)) for t in topics)


def _split(outcome: str) -> tuple[int, str | None]:
    """A topic_admin election outcome (``"elected"``, ``"not needed"``, ``"CODE: why"``) as an
    error code and message."""
    if outcome == topic_admin.ELECTED:
        return 0, None
    if outcome == topic_admin.ELECTION_NOT_NEEDED:
        return int(ErrorCode.ELECTION_NOT_NEEDED), "the preferred leader leads already"
    name, _, why = outcome.partition(": ")
    return int(ErrorCode[name]), why or None


def _too_many(what: str) -> str:
    return f"a {what} request may name at most {MAX_PARTITIONS} partitions"


class ClusterAdminApis:
    """The six APIs of the module docstring for one broker; :class:`RequestHandler` delegates
    to it (it has already checked the cluster-scope ACLs)."""

    log = Logger(namespace="sluice.server.cluster_admin")

    def __init__(self, *, store: Any, replicas: Any, cache: Any, clock: Any,
                 cluster_id: Callable[[], str], brokers_on: Callable[[str | None], list]
                 ) -> None:
        self.store = store
        self.replicas = replicas
        self.cache = cache
        self.clock = clock
        #: The cluster id as Metadata answers it (the broker learns it after start-up).
        self.cluster_id = cluster_id
        #: The live brokers that have a listener, with their address there (Metadata's list).
        self.brokers_on = brokers_on

    # -- DescribeCluster (60) ----------------------------------------------------------------

    def describe_cluster(self, header: Any, body: Any, access: Access) -> dict:
        """The brokers on the listener asked on and the controller, as Metadata answers them.
        Sluice has no separate controller endpoints: ``endpoint_type`` 2 is refused.

        v2's ``is_fenced`` is always false and ``include_fenced_brokers`` adds no one: a Kafka
        broker is fenced while it is left out of Metadata (registered but not caught up, or its
        session lapsed). Sluice lists every registered broker in Metadata, including one the
        controller fenced for want of heartbeats (it only loses leadership and ISR places) and
        one in a controlled shutdown, so every broker answered is one Metadata names."""
        listener = access.security.listener
        if header.api_version >= 1 and body.endpoint_type != 1:
            return {"error_code": int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                    "error_message": "Sluice's controller is a broker; ask for brokers (1)",
                    "endpoint_type": body.endpoint_type, "cluster_id": self.cluster_id(),
                    "brokers": []}
        return {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": self.cluster_id(), "controller_id": self.cache.controller_id,
            "brokers": [{"broker_id": b.id, "host": host, "port": port, "rack": b.rack,
                         "is_fenced": False}
                        for b, (host, port) in self.brokers_on(listener)],
            "cluster_authorized_operations": cluster_authorized_operations(
                access, body.include_cluster_authorized_operations),
        }

    # -- DescribeLogDirs (35) ----------------------------------------------------------------

    def describe_log_dirs(self, header: Any, body: Any) -> dict:
        """This broker's log directories and the size of each partition replica in them (a
        null ``topics``: every partition). An offline directory is answered with
        KAFKA_STORAGE_ERROR and no partitions."""
        wanted: set[TopicPartition] | None = None
        if body.topics is not None:
            wanted = {(t.topic, p) for t in body.topics for p in t.partitions}
        logs = self.replicas.log_manager
        by_dir: dict[Any, dict[str, list[dict]]] = {d: {} for d in logs.log_dirs}
        for (topic, index), part in sorted(self.replicas.partitions.items()):
            if wanted is not None and (topic, index) not in wanted:
                continue
            where = logs.dir_of(topic, index)
            if where not in by_dir:
                continue
            log = part.log
            by_dir[where].setdefault(topic, []).append({
                "partition_index": index, "partition_size": log.size_bytes,
                # Kafka's lag of a current replica: how far its high watermark is past its log
                # end (0 unless the log was truncated under it).
                "offset_lag": max(0, log.high_watermark - log.log_end_offset),
                "is_future_key": False})
        results = []
        for d in logs.log_dirs:
            online = logs.dir_states.is_online(d)
            total = usable = -1
            if online:
                try:
                    usage = shutil.disk_usage(d)
                    total, usable = usage.total, usage.free
                except OSError:
                    pass  # the sizes are optional (-1); the directory's health is not ours
            results.append({
                "error_code": 0 if online else int(ErrorCode.KAFKA_STORAGE_ERROR),
                "log_dir": str(d),
                "topics": [] if not online else [
                    {"name": t, "partitions": ps} for t, ps in sorted(by_dir[d].items())],
                "total_bytes": total, "usable_bytes": usable})
        return {"throttle_time_ms": 0, "error_code": 0, "results": results}

    # -- DeleteRecords (21) ------------------------------------------------------------------

    async def delete_records(self, header: Any, body: Any, access: Access) -> dict:
        """Per partition: DELETE on its topic, then its leader (this broker) moves the log
        start and waits, up to ``timeout_ms``, for every live replica to have moved its own
        (:meth:`ReplicaManager.delete_records`), as Kafka does. A partition named twice is
        INVALID_REQUEST (neither entry is carried out)."""
        too_many = _count(body.topics, lambda t: t.partitions) > MAX_PARTITIONS
        rule = RULES[ApiKey.DELETE_RECORDS]
        named: dict[TopicPartition, int] = {}
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                named[tp] = named.get(tp, 0) + 1
        refused: dict[TopicPartition, str] = {}
        asked: list[tuple[str, int, int]] = []
        for t in body.topics:
            allowed = access.allows_topic(rule, t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if too_many or named[tp] > 1:
                    refused[tp] = "INVALID_REQUEST"
                elif not allowed:
                    refused[tp] = "TOPIC_AUTHORIZATION_FAILED"
                else:
                    asked.append((t.name, p.partition_index, p.offset))
        done = await self.replicas.delete_records(asked, body.timeout_ms) if asked else {}
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                error, low = (refused[tp], -1) if tp in refused else done[tp]
                parts.append({"partition_index": p.partition_index, "low_watermark": low,
                              "error_code": 0 if error is None else int(ErrorCode[error])})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- ElectLeaders (43) -------------------------------------------------------------------

    async def elect_leaders(self, header: Any, body: Any) -> dict:
        """PREFERRED: the controller's preferred-replica election; UNCLEAN (KIP-460): the
        controller gives each partition without a live leader a live replica, outside the ISR
        if need be (ELECTION_NOT_NEEDED where a live leader exists). Both through
        ``topic_admin``, answered once the controller has acted or ``timeout_ms`` passed. A null
        ``topic_partitions`` means every partition, and the answer then leaves out those that
        needed no election (as Kafka's controller does)."""
        kind = body.election_type if header.api_version >= 1 else elect_leaders.PREFERRED
        if kind not in (elect_leaders.PREFERRED, elect_leaders.UNCLEAN):
            return elect_leaders.error_body(header.api_version, body,
                                            int(ErrorCode.INVALID_REQUEST))
        if _count(body.topic_partitions, lambda t: t.partitions) > MAX_PARTITIONS:
            answer = elect_leaders.error_body(header.api_version, body,
                                              int(ErrorCode.INVALID_REQUEST))
            for t in answer["replica_election_results"]:
                for p in t["partition_result"]:
                    p["error_message"] = _too_many("ElectLeaders")
            return answer
        everything = body.topic_partitions is None
        if everything:
            partitions = await topic_admin.all_partitions(self.store)
        else:
            partitions = list(dict.fromkeys(
                (t.topic, p) for t in body.topic_partitions for p in t.partitions))
        outcomes: dict[TopicPartition, tuple[int, str | None]] = {}
        elect = (topic_admin.elect_unclean_leaders if kind == elect_leaders.UNCLEAN
                 else topic_admin.elect_preferred_leaders)
        if partitions:
            try:
                found = await elect(
                    self.store, partitions,
                    timeout_s=min(max(body.timeout_ms, 0) / 1000.0, MAX_ELECTION_WAIT_S),
                    clock=self.clock)
                outcomes = {tp: _split(o) for tp, o in found.items()}
            except topic_admin.AdminRequestPending as e:
                outcomes = {tp: (int(e.error_code), str(e)) for tp in partitions}
            except topic_admin.TopicAdminError as e:  # the controller did not act in time
                outcomes = {tp: (int(ErrorCode.REQUEST_TIMED_OUT), str(e)) for tp in partitions}
        results: dict[str, list[dict]] = {}
        for (topic, p), (code, message) in outcomes.items():
            if everything and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            results.setdefault(topic, []).append(
                {"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
            {"topic": t, "partition_result": ps} for t, ps in results.items()]}

    # -- AlterPartitionReassignments (45) / ListPartitionReassignments (46) -----------------

    async def alter_partition_reassignments(self, header: Any, body: Any) -> dict:
        """Per partition: its new replicas (null: cancel), validated as Kafka does and written
        to the controller's reassignment request (``topic_admin.alter_reassignments``). A
        partition named twice in one request is INVALID_REQUEST for both, and not changed.
        v1's ``allow_replication_factor_change`` false (KIP-860): a target of another size
        than the partition's replicas before any reassignment is INVALID_REPLICATION_FACTOR."""
        allow_rf_change = header.api_version < 1 or body.allow_replication_factor_change
        if _count(body.topics, lambda t: t.partitions) > MAX_PARTITIONS:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": _too_many("AlterPartitionReassignments"),
                    "responses": []}
        named = [((t.name, p.partition_index), p.replicas)
                 for t in body.topics for p in t.partitions]
        counts: dict[TopicPartition, int] = {}
        for tp, _ in named:
            counts[tp] = counts.get(tp, 0) + 1
        changes = {tp: (None if r is None else list(r)) for tp, r in named if counts[tp] == 1}
        try:
            found = await topic_admin.alter_reassignments(
                self.store, changes, allow_replication_factor_change=allow_rf_change)
        except topic_admin.TopicAdminError as e:
            return {"throttle_time_ms": 0, "error_code": int(e.error_code),
                    "error_message": str(e), "responses": [],
                    "allow_replication_factor_change": allow_rf_change}
        responses: dict[str, list[dict]] = {}
        for tp, _ in named:
            if counts[tp] > 1:
                code, message = int(ErrorCode.INVALID_REQUEST), \
                    f"{tp[0]}-{tp[1]} is named more than once"
            else:
                error = found.get(tp)
                code, message = (0, None) if error is None else (int(error.error_code),
                                                                 str(error))
            responses.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "error_code": code, "error_message": message})
        if changes:
            self.log.info("partition reassignments altered: {c}", c=", ".join(
                f"{t}-{p} -> {'cancel' if r is None else r}" for (t, p), r in changes.items()
                if found.get((t, p)) is None))
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "allow_replication_factor_change": allow_rf_change,
                "responses": [{"name": t, "partitions": ps} for t, ps in responses.items()]}

    async def list_partition_reassignments(self, header: Any, body: Any) -> dict:
        """The reassignments in progress, of the partitions named (those not moving are left
        out, as Kafka does) or all of them."""
        if _count(body.topics, lambda t: t.partition_indexes) > MAX_PARTITIONS:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": _too_many("ListPartitionReassignments"), "topics": []}
        wanted = None if body.topics is None else [
            (t.name, p) for t in body.topics for p in t.partition_indexes]
        ongoing = await topic_admin.list_reassignments(self.store, wanted)
        topics: dict[str, list[dict]] = {}
        for (topic, p), r in sorted(ongoing.items()):
            topics.setdefault(topic, []).append(
                {"partition_index": p, "replicas": r.replicas, "adding_replicas": r.adding,
                 "removing_replicas": r.removing})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
