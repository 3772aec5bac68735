"""A classic-group state machine on an injected clock, with the calls its unit tests make
(joins, syncs, the passage of time, a group formed and Stable)."""

from __future__ import annotations

import itertools

from twisted.internet import task

from broker_core.purgatory import Purgatory
from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import GroupState
from coordinator.classic.groups import ClassicGroups
from coordinator.classic.interface import ClassicGroupConfig, JoinResult, SyncResult

E = ErrorCode
G = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000


class Harness:
    def __init__(self, **config: int) -> None:
        self.clock = task.Clock()
        ids = itertools.count(1)
        self.groups = ClassicGroups(
            ClassicGroupConfig(**{"initial_rebalance_delay_ms": DELAY_MS, **config}),
            heartbeat_purgatory=Purgatory("classic_heartbeat", self.clock),
            rebalance_purgatory=Purgatory("classic_rebalance", self.clock),
            new_member_id=lambda client: f"{client}-{next(ids)}")

    def join(self, member_id: str = "", *, client: str = "c", session_ms: int = SESSION_MS,
             rebalance_ms: int = REBALANCE_MS, protocol_type: str = "consumer",
             protocols=(("range", b"R"),), v4: bool = False, group: str = G,
             instance: str | None = None) -> list:
        answers: list[JoinResult] = []
        self.groups.join(group, member_id, client_id=client, client_host="/127.0.0.1",
                         session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                         protocol_type=protocol_type, protocols=protocols,
                         require_known_member_id=v4, respond=answers.append,
                         group_instance_id=instance)
        return answers

    def sync(self, member_id: str, generation: int, assignments=(), *, protocol_type=None,
             protocol_name=None, group: str = G, instance: str | None = None) -> list:
        answers: list[SyncResult] = []
        self.groups.sync(group, member_id, generation, protocol_type=protocol_type,
                         protocol_name=protocol_name, assignments=assignments,
                         respond=answers.append, group_instance_id=instance)
        return answers

    def tick(self, seconds: float) -> None:
        """Let ``seconds`` pass in 0.1 s steps, as a running reactor would (one jump would run
        a timer late, and a timer re-armed from it later still)."""
        self.clock.pump([0.1] * round(seconds * 10))

    def settle(self) -> None:
        """Past the initial delay of members that joined together: it runs twice (they
        arrived during the first)."""
        self.tick(2 * DELAY_MS / 1000 + 0.1)

    def group(self):
        return self.groups.get(G)

    def stable_group(self, n: int = 3, instances: tuple[str | None, ...] = ()) -> list[str]:
        """n members joined at once and synced: generation 1, Stable (the initial delay runs
        twice: members arrived during the first). ``instances``: the first members' group
        instance ids (static members); each gets its member id as assignment."""
        inst = [*instances, *[None] * n][:n]
        joins = [self.join(client=f"c{i}", instance=inst[i]) for i in range(n)]
        self.settle()
        ids = [j[0].member_id for j in joins]
        leader = self.group().leader_id
        for mid in ids:
            if mid != leader:
                self.sync(mid, 1)
        self.sync(leader, 1, [(m, m.encode()) for m in ids])
        assert self.group().state is GroupState.STABLE
        return ids
