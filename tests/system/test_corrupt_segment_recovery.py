"""A segment damaged while its broker is stopped (16 flipped bytes in the middle and a cut tail),
with real broker processes: recovery ends the log at the damaged batch and deletes every later
segment, so readers see a contiguous prefix, never a hole; a follower cut that way refetches
from its leader and rejoins the ISR only once caught up, and, once leader, serves the data
byte-identical to the other replicas."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from broker_core.log.checkpoints import read_offsets
from broker_core.log.manager import RECOVERY_POINTS
from broker_core.wire.records import iter_batches
from tests.support.procs import consume_all

pytestmark = pytest.mark.slow

SEGMENT_BYTES = 100_000
RECORDS = 3_000


def produce(bootstrap: str, topic: str, start: int, count: int, acks: str) -> dict[int, bytes]:
    """``count`` records to partition 0; returns ``{offset: value}`` of the acknowledged ones
    (asserting every one was)."""
    from confluent_kafka import Producer

    acked: dict[int, bytes] = {}
    errors: list = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "batch.num.messages": 20, "enable.idempotence": False})
    for i in range(start, start + count):
        p.produce(topic, value=b"record-%06d-" % i + b"x" * 80, partition=0,
                  on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors
    assert len(acked) == count
    return acked


def segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def damage(segment: Path) -> int:
    """Flip 16 bytes in the middle of ``segment`` and cut 7 bytes off its end; return the base
    offset of the batch the flipped bytes fall in (where the log must end)."""
    data = segment.read_bytes()
    infos = list(iter_batches(data))
    victim = infos[len(infos) // 2]
    at = victim.position + victim.size // 2
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data[at:at + 16]))
        f.truncate(len(data) - 7)
    return victim.base_offset


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.parametrize("stop", ["clean", "kill -9"])
def test_rf1_damaged_segment_leaves_a_contiguous_prefix(make_cluster, stop):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=1, extra={"log.segment.bytes": str(SEGMENT_BYTES),
                                          "log.flush.interval.ms": "100"})
    cluster.start()
    cluster.wait_registered()
    broker = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("holes", 1, 1)])["holes"].result(timeout=30)
    acked = produce(cluster.bootstrap, "holes", 0, RECORDS, acks="1")
    pdir = broker.log_dir / "holes-0"
    segs = segments(pdir)
    assert len(segs) >= 3, segs
    if stop == "clean":
        broker.stop()
    else:
        # The recovery point must lie past segment 0, so the damage is below it: the case
        # where the old recovery kept the later segments.
        second = int(segs[1].stem)
        wait_for(lambda: read_offsets(broker.log_dir / RECOVERY_POINTS).get(("holes", 0), 0)
                 > second, 30, "a recovery point past segment 0")
        broker.kill(signal.SIGKILL)
    end = damage(segs[0])

    broker.start()
    broker.wait_listening()
    cluster.wait_registered(timeout=60)
    got, eof = consume_all(cluster.bootstrap, "holes", 1, group=f"holes-{stop}")
    assert eof == {0}
    offsets = sorted(o for (_p, o) in got)
    assert offsets == list(range(end)), "a contiguous prefix ending at the damaged batch"
    assert all(got[(0, o)] == acked[o] for o in offsets)
    assert [p.name for p in segments(pdir)] == [segs[0].name]
    assert not [p for p in pdir.iterdir() if p.suffix in (".index", ".timeindex")
                and p.stem != segs[0].stem]
    text = broker.log_text()
    assert re.search(rf"recovered holes-0 after an? (un)?clean shutdown.*truncated the log to "
                     rf"offset {end} \({segs[0].name}: at offset {end}: .*{len(segs) - 1} later "
                     r"segment\(s\) deleted", text), broker.log_tail()


def isr_of(bootstrap: str, topic: str) -> list[int]:
    """Partition 0's ISR as the broker asked sees it; empty while that broker does not know
    the partition yet (just after the topic's creation its metadata may name the topic with
    no partitions), so a wait on it goes on instead of failing."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or 0 not in t.partitions:
        return []
    return sorted(t.partitions[0].isrs)


def log_bytes(partition_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in segments(partition_dir))


@pytest.mark.parametrize("stop", ["clean", "kill -9"])
def test_rf3_damaged_follower_refetches_and_rejoins_only_when_caught_up(make_cluster, stop):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=3, extra={"log.segment.bytes": str(SEGMENT_BYTES)})
    cluster.start()
    cluster.wait_registered()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("mirror", 1, 3)])["mirror"].result(timeout=30)
    wait_for(lambda: isr_of(cluster.bootstrap, "mirror") == [1, 2, 3], 30, "ISR 1, 2, 3")
    leader_id = admin.list_topics("mirror", timeout=10).topics["mirror"].partitions[0].leader
    follower_id, other_id = (b for b in (1, 2, 3) if b != leader_id)
    leader, follower, other = (cluster.brokers[b] for b in (leader_id, follower_id, other_id))
    acked = produce(cluster.bootstrap, "mirror", 0, RECORDS, acks="all")
    fdir = follower.log_dir / "mirror-0"
    wait_for(lambda: sum(p.stat().st_size for p in segments(fdir)) ==
             sum(p.stat().st_size for p in segments(leader.log_dir / "mirror-0")),
             30, "the follower to hold the whole log")
    if stop == "clean":
        follower.stop()  # the controller takes it out of the ISR (ControlledShutdown)
    else:
        follower.kill(signal.SIGKILL)  # out of the ISR once its ZooKeeper session expires
    wait_for(lambda: isr_of(leader.address, "mirror") == sorted([leader_id, other_id]), 30,
             "the follower out of the ISR")
    segs = segments(fdir)
    assert len(segs) >= 3, segs
    end = damage(segs[0])
    # more data while it is away: it has to fetch past the damage and past the old end
    acked.update(produce(leader.address, "mirror", RECORDS, 500, acks="all"))
    total = RECORDS + 500

    follower.start()
    follower.wait_listening()
    wait_for(lambda: isr_of(leader.address, "mirror") == [1, 2, 3], 60,
             "the follower back in the ISR")
    # The leader proposed the expansion only once the follower's log reached the high
    # watermark (everything acknowledged), not when it came back at offset `end`.
    caught_up = [int(m.group(1)) for m in re.finditer(
        rf"mirror-0: broker {follower_id} caught up \(log end (\d+)\)", leader.log_text())]
    assert caught_up and caught_up[-1] >= total, caught_up

    # Make the recovered replica the leader: stop the others cleanly (leadership moves to an
    # ISR member each time), and read everything back through it.
    leader.stop()
    other.stop()
    wait_for(lambda: isr_of(follower.address, "mirror") == [follower_id], 30,
             "the recovered replica alone, leading")
    got, eof = consume_all(follower.address, "mirror", 1, group="mirror-check")
    assert eof == {0}
    assert sorted(o for (_p, o) in got) == list(range(total))
    assert all(got[(0, o)] == acked[o] for o in range(total))
    follower.stop()
    data = [log_bytes(cluster.brokers[b].log_dir / "mirror-0") for b in (1, 2, 3)]
    assert len({len(d) for d in data}) == 1 and data[0] == data[1] == data[2]
    assert re.search(rf"recovered mirror-0 after an? (un)?clean shutdown.*truncated the log to "
                     rf"offset {end} ", follower.log_text()), follower.log_tail()


def test_a_leader_answers_kafka_storage_error_for_a_batch_failing_its_crc(make_cluster):
    """Damage only a CRC can see, in a rolled segment, after a clean stop: the open trusts the
    segment (its index and size agree), and the broker answers a fetch reaching the damaged
    batch with KAFKA_STORAGE_ERROR, never with its bytes. The partition is then offline on this
    broker (with one replica, nowhere else to lead) until a restart, whose recovery cuts the
    log at the damage; the batches before it are served again."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker_core.wire.apis import ApiKey
    from broker_core.wire.errors import ErrorCode
    from broker_core.wire.records import decode_records
    from consumer_client.connection import BrokerConnection

    cluster = make_cluster(size=1, extra={"log.segment.bytes": str(SEGMENT_BYTES)})
    cluster.start()
    cluster.wait_registered()
    broker = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("rot", 1, 1)])["rot"].result(timeout=30)
    produce(cluster.bootstrap, "rot", 0, RECORDS, acks="1")
    segs = segments(broker.log_dir / "rot-0")
    assert len(segs) >= 3, segs
    broker.stop()
    infos = list(iter_batches(segs[0].read_bytes()))
    victim = infos[len(infos) // 2]
    with open(segs[0], "r+b") as f:  # the last record's bytes: inside the CRC's range only
        f.seek(victim.position + victim.size - 3)
        f.write(b"\xa5\x5a")
    broker.start()
    broker.wait_listening()
    cluster.wait_registered(timeout=60)

    def fetch(offset: int, max_bytes: int = 1 << 20):
        with BrokerConnection("127.0.0.1", broker.port, timeout=10) as c:
            resp = c.request(ApiKey.FETCH, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                "topics": [{"topic": "rot", "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]},
                version=11)
        return resp.responses[0].partitions[0]

    # a read that stops before the damaged batch is served
    before = fetch(0, max_bytes=victim.position)
    assert before.error_code == 0
    assert [r.offset for r in decode_records(before.records)] == list(range(victim.base_offset))
    for offset in (0, victim.base_offset):  # reaching it: an error, and the partition is offline
        p = fetch(offset)
        assert p.error_code == ErrorCode.KAFKA_STORAGE_ERROR and not p.records, offset
    assert fetch(0, max_bytes=victim.position).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert f"corrupt log rot-0 at offset {victim.base_offset}" in broker.log_text()
    assert "partition rot-0 is OFFLINE on this broker" in broker.log_text()
    # The next start's recovery cuts the log at the damage: the prefix is served again.
    broker.stop()
    broker.start()
    broker.wait_listening()
    cluster.wait_registered(timeout=60)
    # The controller took the partition offline (no other replica); the restarted broker's new
    # registration makes it elect it again: wait for that, not for a moment of the clock.
    deadline = time.monotonic() + 60
    while (again := fetch(0)).error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                             ErrorCode.LEADER_NOT_AVAILABLE,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        assert time.monotonic() < deadline, "rot-0 was not led again after the restart"
        time.sleep(0.2)
    assert again.error_code == 0 and again.high_watermark == victim.base_offset
    assert [r.offset for r in decode_records(again.records)][-1] == victim.base_offset - 1
