"""The leader's ISR changes end to end in ``ReplicaManager`` (real logs, the real
``AlterIsrSender``, a scripted controller connection, time on a ``task.Clock``): an
AlterPartition answer applies only to the change it answers, so a late answer or a late
LeaderAndIsr never ends a newer change that is still in flight (the maximal ISR)."""

from __future__ import annotations

import pytest
from twisted.internet import task

from broker_core.log import LogConfig, LogManager
from broker_core.metadata_cache import BrokerEndpoint, MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch
from tests.support.fake_controller import FakeController as ScriptedController
from tests.support.inline_pool import InlinePool

REPLICAS = (1, 2, 3, 4)
CONTROLLER = 9


class FakeController(ScriptedController):
    """The scripted controller connection, kept open between requests."""

    @property
    def closed(self) -> bool:
        return self._closed




@pytest.fixture
def leader(tmp_path):
    """Broker 1 leading ``t``-0 (replicas 1-4, ISR 1, 2, partition epoch 0) with one record
    committed by broker 2; the controller is the scripted ``FakeController``."""
    clock, ctrl = task.Clock(), FakeController()
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    cache = MetadataCache()
    cache.controller_id = CONTROLLER
    cache.brokers = {CONTROLLER: BrokerEndpoint(CONTROLLER, "127.0.0.1", 9)}
    pool = InlinePool()
    rm = ReplicaManager(1, logs, clock=clock, io_pool=pool, reactor=pool,
                        topic_log_config=lambda topic: LogConfig(), metadata_cache=cache,
                        connect=ctrl.connect)
    lai(rm, (1, 2), 0)
    rm.append(1, 30000, [("t", 0, batch())])
    fetch(rm, 2, 1)
    assert rm.get_partition("t", 0).high_watermark == 1
    yield clock, ctrl, rm
    rm.alter_isr.stop()
    rm.produce_purgatory.shutdown()
    rm.fetch_purgatory.shutdown()
    logs.shutdown()


def batch() -> bytes:
    return build_batch([Record(None, b"v")])


def lai(rm: ReplicaManager, isr: tuple[int, ...], version: int) -> None:
    """The controller's LeaderAndIsr for ``t``-0 at leader epoch 1."""
    rm.apply_leader_and_isr(1, [("t", 0, LeaderAndIsrState(1, 1, isr, REPLICAS, 1, version))],
                            full=False)


def fetch(rm: ReplicaManager, replica: int, offset: int) -> None:
    rm.fetch([("t", 0, offset, 1 << 20, 1)], max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
             replica_id=replica)


def sent_isrs(ctrl: FakeController, i: int) -> list[tuple[list[int], int]]:
    return [(p["new_isr"], p["partition_epoch"])
            for t in ctrl.requests[i][2]["topics"] for p in t["partitions"]]


def test_a_late_answer_to_a_settled_change_leaves_the_newer_change_pending(leader):
    clock, ctrl, rm = leader
    p = rm.get_partition("t", 0)
    fetch(rm, 3, 1)  # broker 3 caught up: change A adds it
    clock.advance(0)
    assert sent_isrs(ctrl, 0) == [([1, 2, 3], 0)]
    # The controller applied A; its LeaderAndIsr overtakes the answer.
    lai(rm, (1, 2, 3), 1)
    assert p.pending_isr is None
    fetch(rm, 4, 1)  # broker 4 caught up: change B, queued behind A's request
    assert p.maximal_isr == (1, 2, 3, 4) and rm.alter_isr.pending == 2
    ctrl.answer(0)  # A's answer, late: ISR 1, 2, 3 at partition epoch 1
    assert p.pending_isr is not None and p.maximal_isr == (1, 2, 3, 4)
    # New data reaches 2 and 3 but not 4: the HW must not pass what 4 has, as B may make it an
    # ISR member (the old code ended B here and moved the HW to 2 over broker 4 at 1).
    rm.append(1, 30000, [("t", 0, batch())])
    fetch(rm, 2, 2)
    fetch(rm, 3, 2)
    assert p.high_watermark == 1
    clock.advance(0)
    assert sent_isrs(ctrl, 1) == [([1, 2, 3, 4], 1)]
    ctrl.answer(1)
    assert p.pending_isr is None and p.isr == (1, 2, 3, 4)
    fetch(rm, 4, 2)
    assert p.high_watermark == 2


def test_a_late_refusal_of_a_settled_change_leaves_a_newer_change_to_the_same_isr(leader):
    """Changes are told apart by the partition epoch too: A and B both propose ISR 1, 2, 3, from
    partition epochs 0 and 1; A's late refusal must not end B."""
    clock, ctrl, rm = leader
    p = rm.get_partition("t", 0)
    fetch(rm, 3, 1)  # A: add broker 3, from partition epoch 0
    clock.advance(0)
    lai(rm, (1, 2), 1)  # another change of the partition (epoch 1) settles A
    fetch(rm, 3, 1)  # B: add broker 3 again, from partition epoch 1
    assert p.maximal_isr == (1, 2, 3)
    ctrl.answer(0, errors={("t", 0): int(ErrorCode.INVALID_UPDATE_VERSION)})  # A refused, late
    assert p.maximal_isr == (1, 2, 3)
    rm.append(1, 30000, [("t", 0, batch())])
    fetch(rm, 2, 2)
    assert p.high_watermark == 1  # broker 3, which B may add, has only offset 0
    clock.advance(0)
    assert sent_isrs(ctrl, 1) == [([1, 2, 3], 1)]


def test_a_late_leader_and_isr_repeating_the_base_of_the_pending_change_keeps_it(leader):
    """The other order: A's answer first, B proposed from it, then A's LeaderAndIsr. B is still
    queued and must be neither forgotten nor dropped from the maximal ISR."""
    clock, ctrl, rm = leader
    p = rm.get_partition("t", 0)
    fetch(rm, 3, 1)
    clock.advance(0)
    ctrl.answer(0)
    assert p.isr == (1, 2, 3) and p.pending_isr is None
    fetch(rm, 4, 1)
    assert p.maximal_isr == (1, 2, 3, 4) and rm.alter_isr.pending == 1
    lai(rm, (1, 2, 3), 1)  # A's LeaderAndIsr, late: the very state B was computed from
    assert p.maximal_isr == (1, 2, 3, 4) and rm.alter_isr.pending == 1
    rm.append(1, 30000, [("t", 0, batch())])
    fetch(rm, 2, 2)
    fetch(rm, 3, 2)
    assert p.high_watermark == 1
    clock.advance(0)
    assert sent_isrs(ctrl, 1) == [([1, 2, 3, 4], 1)]  # B went out


def test_a_newer_leader_and_isr_settles_the_pending_change_and_it_is_not_resent(leader):
    clock, ctrl, rm = leader
    p = rm.get_partition("t", 0)
    fetch(rm, 3, 1)
    clock.advance(0)
    lai(rm, (1, 2, 3), 1)  # settles A while its request is in flight
    ctrl.answer(0, top_error=int(ErrorCode.NOT_CONTROLLER))  # A's fate unknown, but it is settled
    clock.advance(1)
    assert len(ctrl.requests) == 1 and rm.alter_isr.pending == 0
    assert p.pending_isr is None and p.isr == (1, 2, 3)
