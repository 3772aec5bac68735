"""The producer's ``enable.idempotence`` on a ``task.Clock`` with the scripted cluster of
``test_producer_sender``: a producer id before the first send, batches stamped with id, epoch
and consecutive sequences per partition, a retry resent byte for byte, a duplicate answered as
success, and the epoch bump after a sequence error (batches sent under the old epoch fail)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core.config.parsing import ConfigError
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import iter_batches
from consumer_client.producer import Producer
from consumer_client.producer_errors import ProduceError
from consumer_client.producer_idempotence import ProducerIdentity
from tests.support.producer_sender_harness import FakeCluster, answer, make, results


class IdempotentCluster(FakeCluster):
    """Also answers InitProducerId (``request_any``), each recorded in ``inits``."""

    def __init__(self, leaders):
        super().__init__(leaders)
        self.inits: list[tuple[dict, defer.Deferred]] = []

    async def request_any(self, api_key, body):
        assert api_key == ApiKey.INIT_PRODUCER_ID
        d: defer.Deferred = defer.Deferred()
        self.inits.append((body, d))
        return await d


def granted(pid, epoch, error=0):
    return SimpleNamespace(error_code=error, producer_id=pid, producer_epoch=epoch)


def header(records: bytes):
    info = next(iter(iter_batches(records)))
    return info.producer_id, info.producer_epoch, info.base_sequence


def idempotent(**cfg):
    """(clock, cluster, producer) as ``test_producer_sender.make``, idempotent."""
    clock = task.Clock()
    cluster = IdempotentCluster({"t": [1, 2]})
    p = Producer(reactor=clock, cluster=cluster, bootstrap_servers="h:1",
                 enable_idempotence=True, linger_ms=0, **cfg)
    p.wait_for_topic("t")
    clock.advance(0)
    return clock, cluster, p


def records(body):
    return {(t["name"], p["index"]): p["records"] for t in body["topic_data"]
            for p in t["partition_data"]}


def test_idempotence_needs_acks_all():
    with pytest.raises(ConfigError, match="acks=all"):
        make(enable_idempotence=True, acks="1")


def test_nothing_is_sent_before_the_producer_id_and_batches_carry_sequences():
    clock, cluster, p = idempotent()
    got = results([p.send("t", b"a", partition=0), p.send("t", b"b", partition=0)])
    clock.advance(0)
    assert cluster.requests == [] and len(cluster.inits) == 1
    body, d = cluster.inits[0]
    assert (body["transactional_id"], body["producer_id"], body["producer_epoch"]) == (
        None, -1, -1)
    d.callback(granted(42, 0))
    clock.advance(0)
    (node, req, rd), = cluster.requests
    assert header(records(req)[("t", 0)]) == (42, 0, 0)
    rd.callback(answer(req, base=7))
    assert [m.offset for m in got] == [7, 8]
    p.send("t", b"c", partition=0)
    clock.advance(0)
    _, req, _ = cluster.requests[1]
    assert header(records(req)[("t", 0)]) == (42, 0, 2)  # after the two records


def test_a_retry_is_resent_byte_for_byte_and_a_duplicate_is_a_success():
    clock, cluster, p = idempotent()
    got = results([p.send("t", b"a", partition=0)])
    clock.advance(0)
    cluster.inits[0][1].callback(granted(5, 3))
    clock.advance(0)
    _, first, d = cluster.requests[0]
    d.callback(answer(first, errors={0: ErrorCode.NOT_LEADER_OR_FOLLOWER}))
    clock.advance(1)
    _, second, d = cluster.requests[-1]
    assert records(second) == records(first)
    d.callback(answer(second, errors={0: ErrorCode.DUPLICATE_SEQUENCE_NUMBER}, base=11))
    assert [m.offset for m in got] == [11]


@pytest.mark.parametrize("error", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                   ErrorCode.UNKNOWN_PRODUCER_ID,
                                   ErrorCode.INVALID_PRODUCER_EPOCH])
def test_a_sequence_error_bumps_the_epoch_and_sequences_restart(error):
    clock, cluster, p = idempotent()
    failed = results([p.send("t", b"a", partition=0)])
    other = results([p.send("t", b"x", partition=1)])
    clock.advance(0)
    cluster.inits[0][1].callback(granted(5, 0))
    clock.advance(0)
    (n0, r0, d0), (n1, r1, d1) = sorted(cluster.requests, key=lambda r: r[0])
    later = results([p.send("t", b"b", partition=0)])
    d0.callback(answer(r0, errors={0: error}))
    assert isinstance(failed[0].value, ProduceError)
    clock.advance(1)
    assert len(cluster.inits) == 1  # the bump waits for partition 1's request in flight
    d1.callback(answer(r1, errors={1: ErrorCode.NOT_LEADER_OR_FOLLOWER}))
    clock.advance(0)
    body, d = cluster.inits[1]
    assert (body["producer_id"], body["producer_epoch"]) == (5, 0)  # KIP-360: bump
    d.callback(granted(5, 1))
    clock.advance(1)
    # Partition 1's retry was sent under epoch 0: it fails rather than being written twice.
    assert isinstance(other[0].value, ProduceError) and "bumped" in str(other[0].value)
    _, req, rd = cluster.requests[-1]
    assert header(records(req)[("t", 0)]) == (5, 1, 0)
    rd.callback(answer(req, base=3))
    assert [m.offset for m in later] == [3]


def test_an_unanswered_init_is_asked_again_after_the_backoff():
    clock, cluster, p = idempotent(retry_backoff_ms=100)
    p.send("t", b"a", partition=0)
    clock.advance(0)
    cluster.inits[0][1].errback(ConnectionError("gone"))
    clock.advance(0.05)
    assert len(cluster.inits) == 1
    clock.advance(0.05)
    assert len(cluster.inits) == 2 and cluster.requests == []


def test_sequences_wrap_past_int32_max():
    ident = ProducerIdentity()
    ident.granted(1, 0)
    ident._next[("t", 0)] = (1 << 31) - 2
    assert ident.stamp("t", 0, 3)[2] == (1 << 31) - 2
    assert ident.stamp("t", 0, 1)[2] == 1
    with pytest.raises(ValueError):
        ident.granted(-1, 0)
