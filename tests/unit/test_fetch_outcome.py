"""What one Fetch response partition means (consumer_client/fetch_outcome.py), the decision the
consumer's and the Spark reader's fetch loops share. Answers go through the codec."""

from __future__ import annotations

import struct

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch
from consumer_client.fetch_outcome import LEADER_ERRORS, FetchStep, fetch_outcome

VERSION = 12


def partition(error: int = 0, records: bytes | None = None, hw: int = 10):
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": error, "high_watermark": hw, "records": records}]}]}
    frame = b"".join(apis.encode_response(ApiKey.FETCH, VERSION, 1, body))
    return apis.decode_response(ApiKey.FETCH, VERSION, frame)[1].responses[0].partitions[0]


def batch(first: int, n: int) -> bytes:
    return build_batch([Record(None, b"v%d" % i) for i in range(first, first + n)],
                       base_offset=first)


def test_complete_batches_move_the_offset_past_their_last_record():
    data = batch(0, 3) + batch(3, 2)
    out = fetch_outcome(partition(records=data + batch(5, 4)[:20]), 0)
    assert out.step is FetchStep.RECORDS and out.next_offset == 5 and out.high_watermark == 10
    assert bytes(out.records) == data  # the cut-off batch at the end is left out


def test_no_records_or_only_older_ones_is_nothing_and_moves_nothing():
    assert fetch_outcome(partition(records=None), 4).step is FetchStep.NOTHING
    assert fetch_outcome(partition(records=b""), 4).step is FetchStep.NOTHING
    out = fetch_outcome(partition(records=batch(0, 3)), 3)
    assert out.step is FetchStep.NOTHING and out.next_offset == -1


def test_a_first_batch_cut_off_asks_for_more():
    cut = batch(0, 50)[:100]
    out = fetch_outcome(partition(records=cut), 0)
    assert out.step is FetchStep.TOO_LARGE and out.size == 100 and out.records is None


@pytest.mark.parametrize("code", sorted(LEADER_ERRORS))
def test_leader_errors_send_the_fetcher_to_the_leader_again(code):
    out = fetch_outcome(partition(error=code), 0)
    assert out.step is FetchStep.LEADER_MOVED and out.code == code


def test_out_of_range_and_other_errors():
    assert fetch_outcome(partition(error=ErrorCode.OFFSET_OUT_OF_RANGE), 0).step is \
        FetchStep.OUT_OF_RANGE
    out = fetch_outcome(partition(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED), 0)
    assert out.step is FetchStep.FAILED and out.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert fetch_outcome(partition(error=31_000), 0).step is FetchStep.FAILED


def test_a_response_without_the_partition_is_a_stale_leader_unless_it_says_otherwise():
    assert fetch_outcome(None, 0).code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_outcome(None, 0).step is FetchStep.LEADER_MOVED
    out = fetch_outcome(None, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert out.step is FetchStep.FAILED and out.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_first_batch_with_an_impossible_length_fails_the_partition_as_corrupt():
    # A hostile broker's batch length shorter than a header: treated as cut off, it would
    # have the fetcher double its fetch size for ever; it is a corrupt batch instead.
    bad = bytearray(batch(0, 2))
    struct.pack_into(">i", bad, 8, 10)  # batchLength
    out = fetch_outcome(partition(records=bytes(bad)), 0)
    assert out.step is FetchStep.FAILED and out.code == ErrorCode.CORRUPT_MESSAGE
    # After good batches it is handed on later: the good ones are records now.
    out = fetch_outcome(partition(records=batch(0, 2) + bytes(bad)), 0)
    assert out.step is FetchStep.RECORDS and out.next_offset == 2
