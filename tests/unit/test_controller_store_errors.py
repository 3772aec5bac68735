"""A controller event whose writes the metadata store does not take: no critical traceback.

- The store lost its quorum (or ZooKeeper): ConnectionLost. A warning, and a broker change is
  judged again CONFLICT_RETRY_S later, so a dead leader's partitions move once the store
  takes writes again instead of waiting for the next registration change.
- The broker is stopping and its last writes ran out of their short wait: StoreStopping. An
  info line, nothing retried.

Time is a task.Clock; the store is the in-memory one of the coordinator tests."""

from __future__ import annotations

from twisted.internet import defer
from twisted.logger import Logger, LogLevel

from broker_core import metadata_paths as paths
from broker_core.controller.controller import LEADERS_FIRST_WAIT_S
from broker_core.controller.event_manager import CONFLICT_RETRY_S
from broker_core.metadata import ConnectionLost, StoreStopping
from tests.support.controller_harness import make


def failing_writes(store, error: Exception) -> list[int]:
    """Make ``store``'s multis fail with ``error`` while the returned flag list is non-empty."""
    failing = [1]
    real = store.multi

    def multi(ops):
        if failing:
            return defer.fail(error)
        return real(ops)

    store.multi = multi
    return failing


def started(ctl) -> list[dict]:
    """Mark ``ctl`` started (as Controller.start does) and capture its log events."""
    events: list[dict] = []
    ctl.log = Logger(namespace="test.controller", observer=events.append)
    ctl.election.standing = True
    return events


def levels(events: list[dict]) -> set:
    return {e["log_level"] for e in events}


def test_a_broker_change_the_store_did_not_take_is_a_warning_and_is_judged_again():
    store, clock, channels, ctl = make()
    events = started(ctl)
    led_by_3 = [("t", p) for p in range(9) if 1 + p % 3 == 3]
    store.delete(paths.broker(3))
    failing = failing_writes(store, ConnectionLost("no metadata quorum leader took the write"))
    ctl.events.enqueue("broker_change", ctl.broker_failover.on_broker_change)
    assert LogLevel.critical not in levels(events)
    assert any(e["log_level"] is LogLevel.warn and e.get("event") == "broker_change"
               for e in events)
    assert all(ctl.context.states[tp].leader == 3 for tp in led_by_3)  # nothing written
    failing.clear()  # the quorum is back
    clock.advance(CONFLICT_RETRY_S)
    assert all(ctl.context.states[tp].leader != 3 for tp in led_by_3)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert all(3 not in d.isr for d in ctl.context.states.values())
    assert LogLevel.critical not in levels(events)


def test_a_restart_seen_while_the_store_took_no_writes_is_still_announced_on_the_retry():
    """The broker change that saw broker 3 restart updated the live set before its writes
    failed: the retry must still treat 3 as restarted (out of the ISRs, its leaderships moved)
    and send it its whole state."""
    from broker_core.controller import controller as controller_module
    from broker_core.wire.apis import ApiKey

    store, clock, channels, ctl = make()
    started(ctl)
    ctl.context.live[3] = controller_module.LiveBroker(3, "h", 9003, None, -7)  # seen as restarted
    failing = failing_writes(store, ConnectionLost("no metadata quorum leader took the write"))
    ctl.events.enqueue("broker_change", ctl.broker_failover.on_broker_change)
    failing.clear()
    clock.advance(CONFLICT_RETRY_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert all(3 not in d.isr for d in ctl.context.states.values())
    assert all(d.leader != 3 for d in ctl.context.states.values())
    full = [b for k, b, _ in channels[3].sent if k == ApiKey.LEADER_AND_ISR and b["type"] == 1]
    assert len(full) == 1


def test_a_write_abandoned_because_the_broker_stops_ends_quietly():
    store, clock, channels, ctl = make()
    events = started(ctl)
    store.delete(paths.broker(3))
    failing_writes(store, StoreStopping("the node is stopping and the write did not finish "
                                        "within 2s"))
    ctl.events.enqueue("broker_change", ctl.broker_failover.on_broker_change)
    assert levels(events) <= {LogLevel.info, LogLevel.debug}
    assert any("stopping" in e["log_format"] for e in events)
    assert not clock.getDelayedCalls()  # nothing judged again


def test_a_retry_pending_at_a_resignation_is_cancelled():
    store, clock, channels, ctl = make()
    started(ctl)
    store.delete(paths.broker(3))
    failing_writes(store, ConnectionLost("ZooKeeper unreachable"))
    ctl.events.enqueue("broker_change", ctl.broker_failover.on_broker_change)
    assert clock.getDelayedCalls()
    defer.Deferred.fromCoroutine(ctl._resign())
    assert not clock.getDelayedCalls()
