"""Which live broker should own each coordinator shard (docs/coordinator.md#sharding): balanced
rendezvous hashing. Sans-IO: a pure function of the live broker ids and the shard count.

For each shard in order, the brokers are ranked by a stable hash of (shard, broker id) and the
shard goes to the highest-ranked broker that holds fewer than ``ceil(count / live)`` shards.

Invariants:

- deterministic: the same live set and count give the same placement on every broker (a
  keyed hash of the two numbers, never Python's ``hash()``), so brokers agree as soon as their
  views of the live brokers agree;
- balanced: no broker owns more than ``ceil(count / live)`` shards;
- stable: a broker joining or leaving moves few shards (mostly those it takes or held), since
  each shard's ranking of the other brokers does not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _rank(shard: int, broker_id: int) -> int:
    digest = hashlib.blake2b(f"{shard}/{broker_id}".encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def desired_owners(live_brokers: Iterable[int], count: int) -> dict[int, int]:
    """Shard -> the broker that should own it, for every shard 0 .. count-1 (empty when no
    broker is live)."""
    live = sorted(set(live_brokers))
    if not live or count <= 0:
        return {}
    cap = -(-count // len(live))
    held = dict.fromkeys(live, 0)
    owners = {}
    for shard in range(count):
        # Ties (equal digests) are broken by broker id, so the order is total.
        for b in sorted(live, key=lambda b: (_rank(shard, b), -b), reverse=True):
            if held[b] < cap:
                owners[shard] = b
                held[b] += 1
                break
    return owners


def shards_of(broker_id: int, live_brokers: Iterable[int], count: int) -> frozenset[int]:
    """The shards ``broker_id`` should own (empty when it is not live)."""
    return frozenset(s for s, b in desired_owners(live_brokers, count).items()
                     if b == broker_id)
