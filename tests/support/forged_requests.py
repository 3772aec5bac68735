"""Forged control-plane and quorum requests: what an attacker sends to take a cluster over
(issue 15's attacks), one request per API, each one that would do harm if it were served.

Shared by the in-process test of the closed control plane and the system test that replays
the attacks against broker processes; each builder takes plain values (ids, epochs, offsets),
so a test builds them from what it can see, in process or from outside."""

from __future__ import annotations

from collections.abc import Iterable

from broker_core import metadata_paths as paths
from broker_core.raft import wire
from broker_core.raft.messages import (
    AlterVotersRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    VoteRequest,
)
from broker_core.raft.metadata_commands import DeleteNode, ExpireSession, encode
from broker_core.wire.apis import ApiKey

#: A controller epoch far above any real one: a broker that accepted it would ignore its real
#: controller from then on.
HIGH_EPOCH = 99

#: ``(api key, version, body)``: one request.
Forged = tuple[int, int, dict]


def stop_replica_delete(topic: str, partition: int, broker_epoch: int) -> Forged:
    """StopReplica with ``delete_partition``: would delete the partition's directory."""
    return (ApiKey.STOP_REPLICA, 3, {
        "controller_id": 1, "controller_epoch": HIGH_EPOCH, "broker_epoch": broker_epoch,
        "topic_states": [{"topic_name": topic, "partition_states": [
            {"partition_index": partition, "leader_epoch": HIGH_EPOCH,
             "delete_partition": True}]}]})


def leader_and_isr_full_empty(broker_epoch: int) -> Forged:
    """A full (``type=1``) LeaderAndIsr naming no partition: would drop every partition."""
    return (ApiKey.LEADER_AND_ISR, 5, {
        "controller_id": 1, "controller_epoch": HIGH_EPOCH, "broker_epoch": broker_epoch,
        "type": 1, "topic_states": [], "live_leaders": []})


def leader_and_isr_follower_leads(topic: str, partition: int, follower_id: int,
                                  broker_epoch: int, leader_epoch: int = HIGH_EPOCH) -> Forged:
    """LeaderAndIsr making ``follower_id`` the leader at a higher ``leader_epoch`` with ISR
    [itself]: two leaders accepting writes at the same offset (split brain)."""
    state = {"partition_index": partition, "controller_epoch": HIGH_EPOCH,
             "leader": follower_id, "leader_epoch": leader_epoch, "isr": [follower_id],
             "partition_epoch": HIGH_EPOCH, "replicas": [1, 2, 3]}
    return (ApiKey.LEADER_AND_ISR, 5, {
        "controller_id": 1, "controller_epoch": HIGH_EPOCH, "broker_epoch": broker_epoch,
        "type": 1, "topic_states": [{"topic_name": topic, "partition_states": [state]}],
        "live_leaders": []})


def update_metadata_elsewhere(broker_ids: Iterable[int], broker_epoch: int) -> Forged:
    """UpdateMetadata listing every broker at an attacker's address."""
    return (ApiKey.UPDATE_METADATA, 7, {
        "controller_id": 1, "controller_epoch": HIGH_EPOCH, "broker_epoch": broker_epoch,
        "topic_states": [], "live_brokers": [
            {"id": i, "endpoints": [{"port": 1, "host": "attacker.example",
                                     "security_protocol": 0}], "rack": None}
            for i in broker_ids]})


def controlled_shutdown(broker_id: int, broker_epoch: int = -1) -> Forged:
    """ControlledShutdown for ``broker_id``: would take it out of every ISR."""
    return (ApiKey.CONTROLLED_SHUTDOWN, 3, {"broker_id": broker_id,
                                            "broker_epoch": broker_epoch})


def alter_partition_shrink(topic: str, partition: int, broker_id: int,
                           broker_epoch: int) -> Forged:
    """AlterPartition shrinking the ISR to ``broker_id`` alone."""
    return (ApiKey.ALTER_PARTITION, 1, {
        "broker_id": broker_id, "broker_epoch": broker_epoch, "topics": [
            {"topic_name": topic, "partitions": [
                {"partition_index": partition, "leader_epoch": 0, "new_isr": [broker_id],
                 "partition_epoch": 0}]}]})


def broker_heartbeat(broker_id: int, broker_epoch: int) -> Forged:
    """BrokerHeartbeat keeping ``broker_id`` alive."""
    return (ApiKey.BROKER_HEARTBEAT, 0, {
        "broker_id": broker_id, "broker_epoch": broker_epoch, "current_metadata_offset": 0,
        "want_fence": False, "want_shut_down": False})


def follower_fetch(topic: str, partition: int, follower_id: int, fetch_offset: int) -> Forged:
    """A Fetch claiming to be ``follower_id`` holding the log up to ``fetch_offset``: would
    move the high watermark (and acknowledge acks=all writes no follower has)."""
    return (ApiKey.FETCH, 12, {
        "replica_id": follower_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": fetch_offset,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": []})


def control_requests(topic: str, target_id: int, broker_epoch: int, follower_id: int,
                     hw: int, broker_ids: Iterable[int] = (1, 2, 3)) -> list[Forged]:
    """One harmful request per control API against broker ``target_id`` (whose broker epoch
    the attacker may have guessed: ``broker_epoch``), on partition 0 of ``topic``."""
    ids = list(broker_ids)
    return [
        stop_replica_delete(topic, 0, broker_epoch),
        leader_and_isr_full_empty(broker_epoch),
        leader_and_isr_follower_leads(topic, 0, follower_id, broker_epoch),
        update_metadata_elsewhere(ids, broker_epoch),
        alter_partition_shrink(topic, 0, target_id, broker_epoch),
        broker_heartbeat(7, broker_epoch),
        follower_fetch(topic, 0, follower_id, hw + 1_000_000),
        *(controlled_shutdown(i) for i in ids),
    ]


def quorum_requests(cluster_id: str, epoch: int, leader_id: int, session_id: int,
                    topic: str, voter_id: int = 2) -> list[Forged]:
    """One harmful request per quorum API that acts: delete ``topic``'s node and expire a
    session (MetadataWrite), keep a session alive (SessionHeartbeat), a vote and a new epoch
    (Vote, BeginQuorumEpoch, EndQuorumEpoch), a voter's Fetch claiming the whole log, and
    shrinking the voters to the leader alone (AlterPartitionReassignments)."""
    messages = [
        VoteRequest(cluster_id, epoch + 1, voter_id, epoch, 1 << 40),
        BeginQuorumEpochRequest(cluster_id, voter_id, epoch + 1),
        EndQuorumEpochRequest(cluster_id, leader_id, epoch, (voter_id,)),
        FetchRequest(cluster_id, voter_id, epoch, 1 << 40, epoch, 0),
        AlterVotersRequest((leader_id,), 1000),
    ]
    out: list[Forged] = [(wire.api_key_of(m), wire.VERSIONS[wire.api_key_of(m)],
                          wire.request_body(m)) for m in messages]
    for command in (DeleteNode(paths.topic(topic), -1, recursive=True),
                    ExpireSession(session_id)):
        out.append((ApiKey.METADATA_WRITE, 0, {"node_id": voter_id, "command": encode(command)}))
    out.append((ApiKey.SESSION_HEARTBEAT, 0, {"node_id": voter_id, "session_id": session_id}))
    return out
