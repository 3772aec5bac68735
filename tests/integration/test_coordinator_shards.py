"""Coordinator shards on three broker processes (real ZooKeeper, and the metadata quorum) with
Sluice's consumer in processes: groups spread over several brokers' coordinators, every broker
names each group's coordinator (ClusterMetadata v1), and when one coordinator's broker is
killed with SIGKILL only its shards' groups move: the others keep their coordinator and
generation, each moved group resumes from its committed offsets, and no partition of a group is
fetched by two members at any moment (checked at every change of any member's state)."""

from __future__ import annotations

import signal
import time

import pytest

from broker_core.wire.apis import ApiKey
from consumer_client.connection import BrokerConnection
from coordinator.shard_hash import shard_of
from coordinator.shard_placement import desired_owners
from tests.support.cli_runs import eventually, ok
from tests.support.consumer_group_procs import ConsumerProc
from tests.support.procs import ProcessCluster

SHARDS = 6
PARTITIONS = 4
PER_PARTITION = 25
EXTRA = {"group.coordinator.shards": str(SHARDS), "group.min.session.timeout.ms": "300",
         "group.initial.rebalance.delay.ms": "300", "rebalance.backoff.ms": "200",
         "offsets.commit.interval.ms": "200", "zookeeper.session.timeout.ms": "6000",
         "replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "100",
         "broker.session.timeout.ms": "6000"}


@pytest.fixture(params=["zookeeper", "quorum"])
def cluster(request, zookeeper_server, tmp_path):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts, tmp_path, size=3,
                       extra=EXTRA, quorum=quorum, metrics=True)
    try:
        c.start()
        c.wait_registered()
        yield c
    finally:
        c.stop()


def running(cluster):
    return [b for b in cluster.brokers.values() if b.proc is not None and b.proc.poll() is None]


def coordinator_of(cluster, group: str) -> int | None:
    """The coordinator every running broker names for ``group`` (None until they agree)."""
    named = set()
    for b in running(cluster):
        try:
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
                md = c.request(ApiKey.CLUSTER_METADATA, {"group_id": group}, version=1)
        except OSError:
            return None
        if md.error_code:
            return None
        named.add(md.coordinator_id)
    return named.pop() if len(named) == 1 else None


def committed(cluster, group: str, coordinator: int) -> dict[int, int]:
    """The group's committed offsets of topic t, asked of its coordinator (OffsetFetch)."""
    b = cluster.brokers[coordinator]
    with BrokerConnection("127.0.0.1", b.port, timeout=5) as c:
        resp = c.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": [
            {"name": "t", "partition_indexes": list(range(PARTITIONS))}]}, version=7)
    if resp.error_code:
        return {}
    return {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}


def produce(cluster, start: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": False})
    for part in range(PARTITIONS):
        for i in range(start, start + count):
            p.produce("t", value=f"{part}:{i}".encode(), partition=part)
    assert p.flush(60) == 0


def fetching(events: list[dict], until: float) -> set[tuple[str, int]]:
    """What a member fetched at time ``until``: its assignment while its last state then is
    fetching."""
    last = None
    for e in events:
        if e["ev"] == "state" and e["t"] <= until:
            last = e
    if last is None or last["state"] != "fetching":
        return set()
    return {tuple(tp) for tp in last["parts"]}


def assert_never_fetched_twice(members: list[ConsumerProc]) -> None:
    """At every moment any member's state changed, no partition was fetched by two members
    (ownership only changes at those moments, so that is every moment)."""
    timelines = [m.events() for m in members]
    moments = sorted(e["t"] for ev in timelines for e in ev if e["ev"] == "state")
    for t in moments:
        seen: set[tuple[str, int]] = set()
        for ev in timelines:
            now = fetching(ev, t)
            assert not now & seen, f"partitions {sorted(now & seen)} fetched twice at {t}"
            seen |= now


def generations(members: list[ConsumerProc], since: float = 0.0) -> set[int]:
    """The generations the members fetched in from ``since`` on."""
    return {e["gen"] for m in members for e in m.events()
            if e["ev"] == "state" and e["state"] == "fetching" and e["t"] >= since}


def delivered(members: list[ConsumerProc]) -> list[tuple[int, int, float]]:
    return [(e["p"], e["o"], e["t"]) for m in members for e in m.events() if e["ev"] == "msg"]


def shards_active(cluster) -> dict[int, float]:
    """Each running broker's sluice_coordinator_shards_active."""
    return {b.broker_id: b.metric("sluice_coordinator_shards_active") for b in running(cluster)}


def group_in(shard: int) -> str:
    return next(f"grp{i}" for i in range(100_000) if shard_of(f"grp{i}", SHARDS) == shard)


def choose(live: list[int]) -> tuple[int, dict[int, str]]:
    """A broker to kill (the highest id) and a group in one of each broker's shards."""
    placed = desired_owners(live, SHARDS)
    return max(live), {b: group_in(next(s for s in range(SHARDS) if placed[s] == b))
                       for b in live}


def test_groups_spread_and_only_a_killed_coordinators_groups_move(cluster, tmp_path):
    victim, groups = choose(sorted(cluster.brokers))
    for b, g in groups.items():
        eventually(lambda g=g, b=b: coordinator_of(cluster, g) == b, 60,
                   f"group {g} coordinated by broker {b}")
    # Every shard is active on the broker placement chose, and the gauges say so.
    placed = desired_owners(sorted(cluster.brokers), SHARDS)
    eventually(lambda: shards_active(cluster) == {
        b: float(sum(1 for o in placed.values() if o == b)) for b in cluster.brokers}, 30,
        "each broker active for the shards placed on it")
    ok("topics", "create", "--topic", "t", "--partitions", str(PARTITIONS),
       "--replication-factor", "3", "--bootstrap-server", cluster.bootstrap)
    produce(cluster, 0, PER_PARTITION)
    members = {g: [ConsumerProc(tmp_path, cluster.bootstrap, g, f"{g}-{i}", "t:1")
                   for i in range(2)] for g in groups.values()}
    try:
        for b, g in groups.items():
            eventually(lambda g=g, b=b: committed(cluster, g, b) == dict.fromkeys(
                range(PARTITIONS), PER_PARTITION), 90, f"group {g} consumed and committed")
        before = {g: max(generations(ms)) for g, ms in members.items()}
        moved = groups[victim]
        kept = {b: g for b, g in groups.items() if b != victim}
        cluster.brokers[victim].kill(signal.SIGKILL)
        killed_at = time.time()
        survivors = desired_owners([b for b in cluster.brokers if b != victim], SHARDS)
        new_owner = survivors[shard_of(moved, SHARDS)]
        eventually(lambda: coordinator_of(cluster, moved) == new_owner, 90,
                   f"group {moved} moved to broker {new_owner}")
        eventually(lambda: sum(shards_active(cluster).values()) == SHARDS, 30,
                   "every shard active on a survivor")
        produce(cluster, PER_PARTITION, PER_PARTITION)
        for g in members:
            owner = new_owner if g == moved else next(b for b, x in kept.items() if x == g)
            eventually(lambda g=g, owner=owner: committed(cluster, g, owner) == dict.fromkeys(
                range(PARTITIONS), 2 * PER_PARTITION), 120, f"group {g} consumed the rest")
        for b, g in kept.items():
            assert coordinator_of(cluster, g) == b
        for shard, owner in placed.items():  # no shard of a survivor moved
            if owner != victim:
                assert coordinator_of(cluster, group_in(shard)) == owner, f"shard {shard} moved"
        for g in kept.values():
            assert generations(members[g], killed_at) <= {before[g]}, f"group {g} rebalanced"
        assert min(generations(members[moved], killed_at)) > before[moved]
        # The moved group resumed where its offsets were committed: nothing before them again.
        after_kill = [(p, o) for p, o, t in delivered(members[moved]) if t > killed_at]
        assert after_kill and min(o for _, o in after_kill) >= PER_PARTITION
        for p in range(PARTITIONS):
            got = {o for q, o in after_kill if q == p}
            assert got == set(range(PER_PARTITION, 2 * PER_PARTITION))
        for ms in members.values():
            assert_never_fetched_twice(ms)
    finally:
        for ms in members.values():
            for m in ms:
                m.stop()
