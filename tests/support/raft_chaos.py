"""Seeded chaos runs of the quorum simulation: :func:`chaotic_simulation` draws a cluster and
its faults from a seed (a failing seed replays exactly), :func:`run_chaos_then_heal` runs the
chaos, heals everything and checks that a leader is elected and a new entry commits everywhere.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from tests.support.raft_sim import SIM_CONFIG, Faults, Simulation

T = SIM_CONFIG.election_timeout_ms


LIVENESS_BOUND_MS = 40 * T  # generous: split votes and backoffs, never wall-clock time


def chaotic_simulation(seed: int, sim_class: Callable[..., Simulation] = Simulation,
                       **kwargs) -> Simulation:
    rng = random.Random(seed)
    # Small fetch responses make followers catch up over many rounds, which is when entries
    # of older epochs sit replicated without the new leader's own (Raft's figure 8).
    config = dataclasses.replace(SIM_CONFIG, fetch_max_entries=rng.choice([1, 3, 50]))
    voters = (1, 2, 3, 4, 5)[:rng.choice([1, 3, 3, 5])]
    observers = (6, 7)[:rng.choice([0, 1, 2])]
    faults = Faults.random(rng)
    reassign_every_ms = rng.choice([None, 100.0, 400.0])
    snapshot_every_ms = rng.choice([None, 50.0, 300.0])
    # Drawn last, so the earlier draws of a seed stay what they were: how much log a snapshot
    # leaves (none: a fetcher one entry behind needs the snapshot), how big its chunks are,
    # and whether an observer joins late, with an empty log.
    config = dataclasses.replace(config, snapshot_retain_entries=rng.choice([0, 20, None]),
                                 fetch_snapshot_max_bytes=rng.choice([40, 1 << 20]))
    late = bool(observers) and rng.random() < 0.3
    start_at = {observers[-1]: rng.uniform(200.0, 1500.0)} if late else None
    # One-way cuts, flapping links, power cuts mid-write and lost disks.
    faults = faults.with_disk_and_link_faults(rng)
    return sim_class(seed, voters=voters, observers=observers, faults=faults,
                      reassign_every_ms=reassign_every_ms, config=config,
                      snapshot_every_ms=snapshot_every_ms, start_at=start_at, **kwargs)


def run_chaos_then_heal(sim: Simulation, chaos_ms: float = 2000.0) -> None:
    sim.run_for(chaos_ms)
    sim.heal()
    assert sim.run_until(lambda: sim.leader() is not None, LIVENESS_BOUND_MS), \
        f"seed {sim.seed}: no leader {LIVENESS_BOUND_MS} ms after healing"
    proposal = sim.propose_to_leader(b"after-heal")
    assert proposal is not None
    assert sim.run_until(lambda: sim.committed_everywhere(proposal.offset), LIVENESS_BOUND_MS), \
        f"seed {sim.seed}: entry {proposal.offset} not committed everywhere after healing"


