"""In-process brokers in quorum mode (each with its embedded quorum node), started together.
"""

from __future__ import annotations

from twisted.internet import defer, reactor

from broker_core.broker import BrokerService
from tests.support.cluster import (
    GROUP_TIMINGS,
    broker_config,
    free_port,
    stop_brokers,
)

#: The shared group timings, and a short controlled-shutdown backoff.
TIMINGS = {**GROUP_TIMINGS, "controlled_shutdown_retry_backoff_ms": "200"}


def quorum_configs(base, count: int, observers: int = 0, **overrides: str) -> list:
    """Configs of ``count`` voter brokers (ids 1..count) and ``observers`` more (the next
    ids, not in ``quorum.voters``, each with its own ``quorum.listener``); the voters' ports
    are picked before any broker starts because every voter must know the others' addresses
    up front."""
    ports = {i: free_port() for i in range(1, count + 1)}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    listeners = {i: f"127.0.0.1:{free_port()}" for i in range(count + 1, count + observers + 1)}
    # zookeeper.connect is not needed in quorum mode.
    return [broker_config(i, "", base / f"broker-{i}", metadata_store="quorum",
                          quorum_voters=voters, cluster_id="quorum-test",
                          **({"quorum_listener": listeners[i]} if i in listeners else {}),
                          **{**TIMINGS, **overrides})
            for i in range(1, count + observers + 1)]


async def start_quorum_brokers(base, count: int = 3, observers: int = 0,
                               **overrides: str) -> list[BrokerService]:
    """Start the brokers together: the first cannot open its metadata session before a
    majority of voters runs."""
    brokers = [BrokerService(cfg, reactor=reactor)
               for cfg in quorum_configs(base, count, observers, **overrides)]
    results = await defer.DeferredList([defer.maybeDeferred(b.startService) for b in brokers],
                                       consumeErrors=True)
    failed = [r for ok, r in results if not ok]
    if failed:
        await stop_brokers([b for b in brokers if b.running])
        failed[0].raiseException()
    return brokers


