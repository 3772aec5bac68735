"""Replica assignment (pure): Kafka's rack-unaware ``assignReplicasToBrokers``.

Leaders go round-robin over the sorted brokers from a start index; each partition's followers
are shifted by an offset that grows every full round, so replicas of consecutive partitions do not
always land on the same brokers. The first replica is the preferred leader.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class InvalidReplicationFactor(ValueError):
    pass


class InvalidPartitions(ValueError):
    pass


class InvalidReplicaAssignment(ValueError):
    pass


def assign_replicas(brokers: Sequence[int], num_partitions: int, replication_factor: int, *,
                    start_index: int | None = None, start_partition_id: int = 0,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    if num_partitions < 1:
        raise InvalidPartitions(f"number of partitions must be at least 1, got {num_partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactor(
            f"replication factor must be at least 1, got {replication_factor}")
    ids = sorted(set(brokers))
    if not ids:
        raise InvalidReplicationFactor("no live brokers to assign replicas to")
    if replication_factor > len(ids):
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the {len(ids)} live "
            f"broker(s) {ids}")
    rng = rng or random.Random()
    n = len(ids)
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if start_index is None else start_index
    current = start_partition_id
    out: dict[int, list[int]] = {}
    for i in range(num_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[start_partition_id + i] = replicas
        current += 1
    return out


def validate_manual_assignment(assignment: Mapping[int, Sequence[int]],
                               live_brokers: Sequence[int], *,
                               first_partition: int = 0) -> None:
    """Check an operator-given assignment; InvalidReplicaAssignment says what is wrong."""
    if not assignment:
        raise InvalidReplicaAssignment("the assignment is empty")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignment(f"partition ids must be {expected}, got "
                                       f"{sorted(assignment)}")
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1:
        raise InvalidReplicaAssignment("every partition must have the same number of replicas")
    live = set(live_brokers)
    for p, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignment(f"partition {p} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignment(f"partition {p} lists a broker twice: {list(replicas)}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise InvalidReplicaAssignment(f"partition {p} names unknown broker(s) {unknown}")
