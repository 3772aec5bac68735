"""A leader cut off from the controller learns from the metadata store that it was replaced.

A broker whose heartbeats have gone unanswered for a whole session can still read the store
(:mod:`broker_core.controller.heartbeat_sender`). The controller has fenced it: the partitions it
leads have new leaders, written to their leaderAndISR state, but the LeaderAndIsr that would tell
it cannot arrive. :func:`adopt_published_leadership` reads those states and applies every one
whose leader epoch is newer than the one this broker leads at, exactly as that LeaderAndIsr
would: the broker becomes a follower (its produce answers turn to NOT_LEADER_OR_FOLLOWER), and
its metadata cache names the new leader, so clients asking it find the partition's new home.

It only ever *demotes*: a state naming this broker leader at a newer epoch is left to the
controller's own LeaderAndIsr, and a state no newer than the local one changes nothing.
Invariant: what is applied is what the controller wrote (a znode value and version), never a
decision made here.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata_cache import PartitionState
from broker_core.replica.partition import LeaderAndIsrState

log = Logger(namespace="sluice.broker.heartbeat")


async def adopt_published_leadership(broker_id: int, store: Any, replicas: Any,
                                     cache: Any) -> int:
    """Apply the newer published state of every partition this broker leads; returns how many
    partitions it gave up."""
    led = sorted(tp for tp, p in replicas.partitions.items() if p.is_leader)
    if not led:
        return 0
    raw = await store.get_many([paths.leader_and_isr(*tp) for tp in led])
    states: list[tuple[str, int, LeaderAndIsrState]] = []
    for tp, got in zip(led, raw, strict=True):
        p = replicas.partitions.get(tp)
        if got is None or p is None or not p.is_leader or p.state is None:
            continue
        data, stat = got
        try:
            v = paths.LeaderAndIsr.from_bytes(data)
        except ValueError as e:
            log.warn("unreadable state of {t}-{p}: {e}", t=tp[0], p=tp[1], e=e)
            continue
        if v.leader == broker_id or v.leader_epoch <= p.state.leader_epoch:
            continue
        states.append((tp[0], tp[1], LeaderAndIsrState(
            v.leader, v.leader_epoch, tuple(v.isr), p.state.replicas, v.controller_epoch,
            stat.version)))
    if not states:
        return 0
    epoch = max([replicas.controller_epoch, *(s.controller_epoch for _, _, s in states)])
    result = replicas.apply_leader_and_isr(epoch, states, full=False)
    if isinstance(result, str):
        log.warn("published leadership not applied: {e}", e=result)
        return 0
    given_up = [(t, i, s) for t, i, s in states if result.get((t, i)) is None]
    cache.apply(cache.controller_id, cache.controller_epoch, list(cache.brokers.values()),
                [(t, i, PartitionState(s.leader, s.leader_epoch, s.isr, s.replicas, (),
                                       s.zk_version)) for t, i, s in given_up])
    log.warn("broker {b} cannot reach the controller and gave up leadership of {n} partitions "
             "the controller moved (e.g. {ex})", b=broker_id, n=len(given_up),
             ex=", ".join(f"{t}-{i} now led by {s.leader}" for t, i, s in given_up[:3]))
    return len(given_up)
