"""A real broker process refuses what its log validator finds invalid: a batch with a valid CRC
whose records are garbage, a batch whose record count lies, and a compression bomb of each codec
(zstd 128 KiB -> 4 GiB, gzip ~900 KiB -> 900 MiB, lz4 ~1 MiB -> 248 MiB, snappy claiming 4 GiB).
Each is answered with its error (and ``record_errors`` naming the record), the partition's log end
offset does not move, the broker's resident memory stays flat, and a real client still consumes
the good records around them."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Compression, Record, build_batch
from consumer_client.connection import BrokerConnection
from tests.support import bad_batches as bb
from tests.support.procs import consume_all

pytestmark = pytest.mark.slow

TOPIC = "validated"


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def produce(conn: BrokerConnection, records: bytes) -> object:
    resp = conn.request(ApiKey.PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}, version=8)
    return resp.responses[0].partition_responses[0]


def log_end_offset(conn: BrokerConnection) -> int:
    resp = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, version=5)
    return resp.topics[0].partitions[0].offset


def test_garbage_records_count_lies_and_bombs_are_refused_by_a_real_broker(make_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=1)
    cluster.start()
    cluster.wait_registered()
    broker = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)

    # A good record from a real client first.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(TOPIC, value=b"good before", partition=0)
    assert producer.flush(30) == 0

    with BrokerConnection("127.0.0.1", broker.port, timeout=60) as conn:
        assert log_end_offset(conn) == 1
        rss_before = vm_rss_mib(broker.proc.pid)

        garbage = bb.batch(bb.record(0) + b"\xff" * 11 + b"\x01", 2)
        part = produce(conn, garbage)
        assert part.error_code == ErrorCode.CORRUPT_MESSAGE
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (1, "record length varint is longer than 5 bytes")]
        assert "record 1 of the batch" in part.error_message
        assert log_end_offset(conn) == 1

        lie = bb.batch(bb.record(0) + bb.record(1) + bb.record(2), 1_000_000)
        part = produce(conn, lie)
        assert part.error_code == ErrorCode.CORRUPT_MESSAGE
        assert [e.batch_index for e in part.record_errors] == [3]
        assert "1000000 declared records" in part.error_message
        assert log_end_offset(conn) == 1

        for codec in (Compression.ZSTD, Compression.GZIP, Compression.LZ4, Compression.SNAPPY):
            part = produce(conn, bb.bomb_batch(codec))
            assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE, codec
            assert f"{codec.name} payload decompresses to more than" in part.error_message
            assert log_end_offset(conn) == 1, codec

        rss_after = vm_rss_mib(broker.proc.pid)
        # The bombs expand to 248 MiB .. 4 GiB; decompression stops at max.message.bytes.
        assert rss_after - rss_before < 100, (rss_before, rss_after)

        # The broker still takes good batches, at the next offset.
        part = produce(conn, build_batch([Record(None, b"good after", [], 1)]))
        assert (part.error_code, part.base_offset) == (0, 1)

    assert broker.proc.poll() is None, broker.log_tail()
    got, eof = consume_all(cluster.bootstrap, TOPIC, 1, group="validated-check")
    assert eof == {0}
    assert got == {(0, 0): b"good before", (0, 1): b"good after"}
