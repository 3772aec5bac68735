"""Applying the controller's LeaderAndIsr command to this broker's replicas
(docs/design.md#controller-commands): each named partition becomes a leader or a follower of
the named broker, and an INIT command (``full``) deletes the partitions it does not name.

Owns no state: the partitions, the controller epoch, the fetchers and the purgatories are the
:class:`~broker_core.replica.manager.ReplicaManager`'s. Invariants: a command from an older
controller epoch changes nothing; a stale partition state (older leader epoch) is refused and
leaves the partition as it was; a partition this broker follows is fetched from the leader the
state names, or from no one when its address is unknown; waiting produce and fetch requests are
re-checked once per command, never per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker_core.log import LogDirOffline
from broker_core.replica.partition import LeaderAndIsrState, Partition
from broker_core.wire.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_core.replica.manager import ReplicaManager


class ApplySummary:
    """What one LeaderAndIsr changed, for its one log line: per kind of change, how many
    partitions, the range of leader epochs, and the first few partitions as examples."""

    EXAMPLES = 3

    def __init__(self) -> None:
        self._kinds: dict[str, list[Any]] = {}

    def add(self, kind: str, tp: TopicPartition, epoch: int | None = None) -> None:
        entry = self._kinds.setdefault(kind, [0, None, None, []])
        entry[0] += 1
        if epoch is not None:
            entry[1] = epoch if entry[1] is None else min(entry[1], epoch)
            entry[2] = epoch if entry[2] is None else max(entry[2], epoch)
        if len(entry[3]) < self.EXAMPLES:
            entry[3].append(f"{tp[0]}-{tp[1]}")

    def __bool__(self) -> bool:
        return bool(self._kinds)

    def describe(self) -> str:
        parts = []
        for kind, (n, lo, hi, examples) in self._kinds.items():
            epochs = "" if lo is None else (f" at epoch {lo}" if lo == hi
                                            else f" at epochs {lo}-{hi}")
            more = ", ..." if n > len(examples) else ""
            parts.append(f"{kind} for {n} partitions{epochs} ({', '.join(examples)}{more})")
        return "; ".join(parts)


class LeaderAndIsrApplier:
    """Applies LeaderAndIsr commands to ``replicas``' partitions; see the module docstring."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def apply(
        self,
        controller_epoch: int,
        states: Iterable[tuple[str, int, LeaderAndIsrState]],
        *,
        full: bool,
        leaders: Mapping[int, tuple[str, int]] | None = None,
    ) -> dict[TopicPartition, str | None] | str:
        """See :meth:`ReplicaManager.apply_leader_and_isr`."""
        rm = self.replicas
        if controller_epoch < rm.controller_epoch:
            return "STALE_CONTROLLER_EPOCH"
        rm.controller_epoch = max(rm.controller_epoch, controller_epoch)
        now_ms = rm._now_ms()
        touched: list[TopicPartition] = []
        results: dict[TopicPartition, str | None] = {}
        named: set[TopicPartition] = set()
        # One summary line per command, not a line per partition: a failover names thousands.
        summary = ApplySummary()
        for topic, index, state in states:
            tp = (topic, index)
            named.add(tp)
            results[tp] = error = self._apply_one(tp, state, now_ms, leaders, summary)
            if error is None:
                touched.append(tp)
        if full:
            # The INIT flag carries every partition this broker hosts.
            for tp in list(rm.partitions):
                if tp not in named:
                    summary.add("deleted (not named by an INIT LeaderAndIsr)", tp)
                    rm._stop_partition(tp, delete=True, wake=False)
                    touched.append(tp)
        # Waiting produce and fetch requests see the new states: a follower cannot satisfy them
        # any more. Woken once for the whole command, not per partition: a follower's delayed
        # fetch names every partition it follows here, and re-checking it after each of
        # thousands of partitions would cost quadratic time during a failover.
        rm._wake_many(touched)
        rm.fetchers.shutdown_idle()
        if summary:
            rm.log.info("LeaderAndIsr (controller epoch {c}{full}, {n} partitions): {what}",
                        c=controller_epoch, full=", INIT" if full else "", n=len(named),
                        what=summary.describe())
        return results

    def _apply_one(self, tp: TopicPartition, state: LeaderAndIsrState, now_ms: int,
                   leaders: Mapping[int, tuple[str, int]] | None,
                   summary: ApplySummary) -> str | None:
        """Apply one partition's state; return its error name, None if applied (the partition
        is then touched: its waiting requests must be re-checked)."""
        rm = self.replicas
        topic, index = tp
        if rm.broker_id not in state.replicas:
            return "UNKNOWN_TOPIC_OR_PARTITION"
        existing = rm.partitions.get(tp)
        if existing is not None and existing.is_stale(state):
            summary.add("ignored as stale", tp)
            return "STALE_CONTROLLER_EPOCH"
        try:
            p = rm._get_or_create(topic, index)
        except LogDirOffline as e:
            summary.add("refused (log directory offline)", tp)
            rm.log.debug("{e}", e=e)
            return "KAFKA_STORAGE_ERROR"
        except OSError as e:
            rm.log.error("cannot create log for {t}-{p}: {e}", t=topic, p=index, e=e)
            rm.storage_error(tp, e, "log creation")
            return "KAFKA_STORAGE_ERROR"
        if state.leader == rm.broker_id:
            rm.fetchers.unfollow([tp])
            old_isr = p.isr if p.is_leader else None
            new_leadership = p.make_leader(state, now_ms)
            if old_isr is not None and not new_leadership:
                rm._isr_changed(p, old_isr)
            if new_leadership:
                summary.add("became leader", tp, state.leader_epoch)
        else:
            changed = p.make_follower(state)
            if changed:
                summary.add(f"following broker {state.leader}", tp, state.leader_epoch)
            if rm.fetchers.leaving and rm.broker_id not in state.isr:
                # Its own controlled shutdown took this broker out of the ISR: one more fetch
                # would only make the leader ask to take it back (ReplicaFetcherManager.
                # begin_leaving says why that stalls acks=all writes).
                rm.fetchers.unfollow([tp])
            elif changed or rm.fetchers.following(tp) != state.leader:
                self.follow(p, state.leader, leaders)
        if p.pending_isr is None:
            # The state settled whatever we had asked the controller about this partition
            # (a state repeating the one a pending change was computed from leaves it be).
            rm.alter_isr.forget(tp)
        return None

    def follow(self, p: Partition, leader: int,
               leaders: Mapping[int, tuple[str, int]] | None) -> None:
        """Fetch ``p`` from broker ``leader`` (from no one if -1 or its address is unknown)."""
        rm = self.replicas
        tp = (p.topic, p.index)
        if leader < 0:
            rm.fetchers.unfollow([tp])
            return
        address = (leaders or {}).get(leader)
        if address is None:
            endpoint = rm.metadata_cache.brokers.get(leader)
            address = None if endpoint is None else (endpoint.host, endpoint.port)
        if address is None:
            # Startup from ZooKeeper state before any metadata: the controller's LeaderAndIsr
            # for this broker at its start carries the address.
            rm.log.info("{t}-{p}: address of leader {l} unknown yet; not fetching",
                        t=tp[0], p=tp[1], l=leader)
            rm.fetchers.unfollow([tp])
            return
        rm.fetchers.follow(p, leader, address)
