"""The controller's request batch: brokers sent the same partitions share one body whose
partition list is encoded once; each still gets its own broker epoch and INIT flag, and every
body decodes to what the unshared body would have been."""

from __future__ import annotations

from twisted.internet import defer

from broker_core.controller.batch import (
    LEADER_AND_ISR_VERSION,
    UPDATE_METADATA_VERSION,
    LiveBroker,
    PartitionDecision,
    RequestBatch,
)
from broker_core.wire.apis import ApiKey
from broker_core.wire.messages import leader_and_isr, update_metadata
from broker_core.wire.schema import Encoded


class FakeChannel:
    """Records what is sent (test-only accessor: ``sent``) and answers with an empty body."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, dict]] = []

    def send(self, api_key: int, version: int, body: dict) -> defer.Deferred:
        self.sent.append((api_key, version, body))
        return defer.succeed(None)


def make_batch():
    """(live brokers, channels, batch) for three live brokers and one dead (4)."""
    live = {b: LiveBroker(b, "h", 9000 + b, None, 100 + b) for b in (1, 2, 3)}
    channels = {b: FakeChannel() for b in live}
    return live, channels, RequestBatch(controller_id=1, controller_epoch=7)


def decision(p: int, leader: int) -> PartitionDecision:
    return PartitionDecision(leader, 3, (leader, 2), (leader, 2, 4), 5 + p, 7, 100 + leader)


def bodies(channels, api_key):
    return {b: body for b, ch in channels.items() for k, _, body in ch.sent if k == api_key}


def test_brokers_sent_the_same_partitions_share_one_encoded_body():
    live, channels, batch = make_batch()
    for p in range(50):
        d = decision(p, 1 + p % 3)
        batch.leader_and_isr(live, ("t", p), d)
        batch.update_metadata(live, ("t", p), d)
    batch.full_leader_and_isr(2)
    batch.send(live, channels.__getitem__)

    lai = bodies(channels, ApiKey.LEADER_AND_ISR)
    assert isinstance(lai[1]["topic_states"], Encoded)
    assert lai[1]["topic_states"] is lai[2]["topic_states"] is lai[3]["topic_states"]
    assert [lai[b]["broker_epoch"] for b in (1, 2, 3)] == [101, 102, 103]
    assert [lai[b]["type"] for b in (1, 2, 3)] == [0, 1, 0]
    um = bodies(channels, ApiKey.UPDATE_METADATA)
    assert um[1]["topic_states"] is um[3]["topic_states"]
    assert [um[b]["broker_epoch"] for b in (1, 2, 3)] == [101, 102, 103]

    # What goes on the wire is what the unshared body for that broker would have been.
    for b in (1, 2, 3):
        parts = batch._leader_and_isr[b]
        plain = batch._leader_and_isr_body(live[b], parts, b == 2, live)
        msg = leader_and_isr.REQUEST
        assert msg.to_bytes(lai[b], LEADER_AND_ISR_VERSION) == \
            msg.to_bytes(plain, LEADER_AND_ISR_VERSION)
        plain = batch._update_metadata_body(live[b], batch._metadata[b], live)
        msg = update_metadata.REQUEST
        assert msg.to_bytes(um[b], UPDATE_METADATA_VERSION) == \
            msg.to_bytes(plain, UPDATE_METADATA_VERSION)


def test_brokers_sent_different_partitions_get_their_own_bodies():
    live, channels, batch = make_batch()
    batch.leader_and_isr([1, 2], ("t", 0), decision(0, 1))
    batch.leader_and_isr([3], ("t", 1), decision(1, 3))
    batch.send(live, channels.__getitem__)
    lai = bodies(channels, ApiKey.LEADER_AND_ISR)
    assert lai[1]["topic_states"] is lai[2]["topic_states"]
    assert lai[3]["topic_states"] is not lai[1]["topic_states"]
    decoded = leader_and_isr.REQUEST.from_bytes(
        leader_and_isr.REQUEST.to_bytes(lai[3], LEADER_AND_ISR_VERSION), LEADER_AND_ISR_VERSION)
    assert [(t.topic_name, [s.partition_index for s in t.partition_states])
            for t in decoded.topic_states] == [("t", [1])]
    assert [x.broker_id for x in decoded.live_leaders] == [3]
