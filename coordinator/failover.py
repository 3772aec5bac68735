"""Coordinator failover (docs/design.md#coordinator-failover): on winning a shard's election,
the shard's groups whose partition owners are in ZooKeeper are recreated empty and wait, bounded by the
initial rebalance delay, for their previous members to re-register before they rebalance.

Invariants:

- only groups of the service's shard (:func:`coordinator.shard_hash.shard_of`) are loaded;
- only reads: nothing is written here (the rebalance that follows writes, fenced);
- a load abandons itself as soon as the term it started in ends, or the coordinator stops
  being active;
- a group that gained a member while its owners were being read is left to that member's
  rebalance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import NoNode
from coordinator import rebalance
from coordinator.registry import GroupRegistry
from coordinator.shard_hash import shard_of

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator")


async def load_groups_from_zookeeper(service: CoordinatorService) -> None:
    """Failover: the shard's groups whose owners are in ZooKeeper wait (bounded by the initial
    rebalance delay) for their previous members to re-register before they rebalance."""
    term = service.term
    try:
        children = await service.store.get_children(paths.CONSUMERS)
    except NoNode:
        return
    now = service.clock.seconds()
    delay = service.config.initial_rebalance_delay_ms / 1000.0
    for gid in sorted(children):
        if gid in paths.CONSUMERS_RESERVED or shard_of(gid, service.shard_count) != service.shard:
            continue
        try:
            paths.validate_group_id(gid)
        except ValueError:
            continue
        probe = GroupRegistry(gid)
        owners = await service.rebalance_context.read_owners(probe)
        if term != service.term or not service.active:
            return
        if not owners:
            continue
        g = service.registries.group(gid)
        if g.members:
            continue  # someone registered while we were reading
        g.expected = {rebalance.thread_owner(t) for t in owners.values()}
        g.not_before = now + delay
        g.empty_since = now
        log.info("group {g} had {n} owners before the failover; waiting up to {d}s for "
                 "them to re-register", g=gid, n=len(g.expected), d=delay)
        service.request_rebalance(g)
