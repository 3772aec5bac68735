"""Broker failover (docs/design.md#replication-and-the-controller): what the controller does when
brokers register, leave, restart, or are fenced or unfenced, and for partitions left without a
leader.

A broker change reads the registrations afresh and judges *every* partition against the brokers
registered and not fenced (after a failover the new controller never saw the old live set): new
leaderships are written and sent first, ISR shrinks after, and new or restarted brokers then learn
their whole state. Invariants:

- a restarted replica leaves the ISRs (its recovery may have cut its log), and a leader that
  restarted gets a new leader generation, once (:meth:`BrokerFailover.leader_restarted` is
  idempotent on the written state);
- brokers found new or restarted are owed their whole state (``owed_new`` / ``owed_bounced``)
  until a broker change has sent it, even if that change's writes failed and it is judged again;
- a broker change the metadata store did not take is judged again once, later
  (:meth:`BrokerFailover.retry_broker_change`); resigning forgets all of it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from broker_core import metadata_paths as paths
from broker_core.controller import log_dir_failure
from broker_core.controller.batch import PartitionDecision, RequestBatch
from broker_core.controller.decisions import Decide
from broker_core.controller.election import NO_LEADER, Election, offline_leader, shrink_isr
from broker_core.controller.procedure import ControllerProcedure
from broker_core.wire.topic_partition import TopicPartition


class BrokerFailover(ControllerProcedure):
    """Broker changes and offline partitions of one controller. ``controller`` supplies
    ``active``, ``events``, ``fencing``, ``channels`` / ``_open_channel``, the leadership rules
    (``_usable_live``, ``_fenced_brokers``, ``_offline_election``), ``_new_batch`` / ``_send`` /
    ``_send_leaders_first``, and its ``context`` and ``writer``."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.retry_due = False  # a broker change is to be judged again
        #: New / restarted brokers a broker change has not finished announcing (see
        #: on_broker_change); emptied on resigning (a new controller sends everyone everything).
        self.owed_new: set[int] = set()
        self.owed_bounced: set[int] = set()

    def forget(self) -> None:
        """The controller resigned: nothing is owed, nothing is to be judged again."""
        self.retry_due = False
        self.owed_new, self.owed_bounced = set(), set()

    def retry_broker_change(self) -> None:
        """Judge the brokers again
        :data:`~broker_core.controller.event_manager.CONFLICT_RETRY_S` from now (once, however
        many events failed meanwhile); cancelled by a resignation."""
        if self.retry_due:
            return
        self.retry_due = True

        async def again() -> None:
            self.retry_due = False
            await self.on_broker_change()

        self.controller.events.later("broker_change (retry)", again)

    async def on_broker_change(self, unfenced: Collection[int] = ()) -> None:
        """Registrations changed (or, with ``unfenced``, brokers were fenced or unfenced):
        judge every partition against the registered brokers that are not fenced."""
        ids = await self.ctx.children(paths.BROKER_IDS)
        now = await self.ctx.read_brokers(ids)
        if not self.controller.active:
            return
        dead = set(self.ctx.live) - set(now)
        new = set(now) - set(self.ctx.live)
        bounced = {b for b in set(now) & set(self.ctx.live)
                   if now[b].epoch != self.ctx.live[b].epoch}
        # A broker that finished its controlled shutdown (or came back as a new incarnation) is
        # an ordinary broker again.
        self.ctx.shutting_down -= dead | bounced
        # A new incarnation starts with every log directory it has online (it reports again).
        self.ctx.offline_replicas.forget(dead | bounced)
        for b in dead:
            ch = self.controller.channels.pop(b, None)
            if ch is not None:
                ch.stop()
        self.ctx.live = now
        for b in new | bounced:
            self.controller._open_channel(now[b])
        if self.controller.fencing is not None:
            self.controller.fencing.liveness.registered(now, bounced)
        fenced = self.controller._fenced_brokers()
        # An unfenced broker (still registered) learns its whole state, as a restarted one does.
        new = new | {b for b in unfenced if b in now and b not in fenced}
        # Brokers an earlier broker change found new or restarted but did not finish announcing
        # (its writes failed and it is being judged again): ``self.ctx.live`` knows them already,
        # so only this record says they are still owed their whole state, and that a restarted
        # one's replicas are to leave the ISRs.
        bounced |= {b for b in self.owed_bounced if b in now and b not in new}
        new |= {b for b in self.owed_new if b in now and b not in bounced}
        self.owed_new, self.owed_bounced = set(new), set(bounced)

        # Judge every partition against the live set, not just the brokers that left since the
        # last event: after a failover the new controller never saw the old live set. A fenced
        # broker counts as dead here.
        judge = self.judge_live(bounced)
        dead_leaders, restarted, shrinks = self.classify_live(judge)
        leaders = dead_leaders + restarted
        if not (dead or new or bounced or leaders or shrinks):
            return
        self.log.info("broker change: new {new}, dead {dead}, restarted {bounced}; "
                      "{n} partitions to re-elect, {s} ISRs to shrink", new=sorted(new),
                      dead=sorted(dead), bounced=sorted(bounced), n=len(leaders),
                      s=len(shrinks))
        # New leaderships first, the ISR shrinks once the brokers have taken them (or a moment
        # passed): clients wait for leaders, not for the bookkeeping.
        moved = await self.writer.write_decisions(leaders, judge, "new leaders")
        await self.controller._send_leaders_first(moved, later=new | bounced)
        if not self.controller.active:
            return
        batch = self.controller._new_batch()
        written = await self.writer.write_decisions(shrinks, judge, "ISR shrinks")
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        # New and restarted brokers learn everything they host (the leaderships moved above
        # included: they were left out of that send), and the full metadata.
        for b in new | bounced:
            batch.full_leader_and_isr(b)
            for tp, d in self.ctx.states.items():
                if b in d.replicas:
                    batch.leader_and_isr([b], tp, d)
                batch.update_metadata([b], tp, d)
        batch.update_metadata(self.ctx.live)
        await self.elect_offline_partitions(batch, send=False)
        self.controller._send(batch)
        self.owed_new, self.owed_bounced = set(), set()
        if self.ctx.reassigning and (new or bounced):
            # A new replica that was down can catch up now.
            self.controller.events.enqueue("reassignment_wakeup", self.controller.reassignment.wakeup)
        if new or bounced:
            # Its failure notification may have been handled before this event saw its new
            # registration (and ignored as another epoch's): read its record again.
            self.controller.events.enqueue("log_dir_refresh", lambda: log_dir_failure.refresh_brokers(
                self.controller, sorted(new | bounced)))

    def judge_live(self, bounced: Collection[int]) -> Decide:
        """What a broker change means for one partition, against the live brokers at the time
        it is called (so a decision taken again after a conflict, or on a retry, judges the
        present):

        - its leader is not live: an offline election (it may come out leaderless: no live ISR
          member and no unclean election);
        - its leader restarted (see :meth:`leader_restarted`): another in-sync replica that
          did not restart leads if there is one (Kafka's rule: a restart is a failure, then a
          start); otherwise the same leader in a new generation (a new leader epoch);
        - an ISR member is not live, or restarted (``bounced``): the ISR without it (same
          leader, same epoch);
        - otherwise nothing. A leaderless partition is left to
          :meth:`elect_offline_partitions`.

        Why a restarted replica leaves the ISR even when the restart was quick: its recovery may
        have cut its log (a torn tail, a batch failing its CRC), so it may lack messages it had
        acknowledged as an ISR member. Kept in the ISR it could be elected and take committed
        messages away; out of it, it refetches and is asked back once caught up.
        """

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            live = self.controller._usable_live()
            if d.leader == NO_LEADER:
                return None
            if d.leader not in live:
                return self.controller._offline_election(tp, d, live)
            gone = [b for b in d.isr if b not in live or (b in bounced and b != d.leader)]
            if self.leader_restarted(d, bounced):
                others = [b for b in self.ctx.offline_replicas.usable(tp, live)
                          if b != d.leader and b not in bounced and b not in self.ctx.shutting_down]
                el = offline_leader(d.replicas, d.isr, others, unclean_allowed=False)
                if el.leader != NO_LEADER:
                    return el
                return Election(d.leader, shrink_isr(d.isr, gone), new_generation=True)
            if gone:
                return Election(d.leader, shrink_isr(d.isr, gone))
            return None

        return decide

    def leader_restarted(self, d: PartitionDecision, bounced: Collection[int]) -> bool:
        """Does the live leader of ``d`` need a new leader generation? It does when the
        registration it was made leader under (``leader_broker_epoch``) is not its current one:
        it restarted, seen by us (``bounced``) or not (while there was no controller, or before
        this one loaded its state). A state without a recorded registration (-1) counts as
        restarted only if the leader is in ``bounced``. Idempotent: once the new generation is
        written it records the current registration, so judging the written state again bumps
        nothing (a decision taken again after a conflict must not bump the epoch twice)."""
        reg = self.ctx.live.get(d.leader)
        if reg is None:
            return False
        if d.leader_broker_epoch >= 0:
            return d.leader_broker_epoch != reg.epoch
        return d.leader in bounced

    def classify_live(self, judge: Decide) -> tuple[list[TopicPartition], list[TopicPartition],
                                                    list[TopicPartition]]:
        """The partitions ``judge`` would change, as (dead leaders, restarted leaders, ISR
        shrinks): new leaderships are written and sent before the shrinks."""
        dead: list[TopicPartition] = []
        restarted: list[TopicPartition] = []
        shrinks: list[TopicPartition] = []
        live = self.controller._usable_live()
        for tp, d in self.ctx.states.items():
            el = judge(tp, d)
            if el is None:
                continue
            if d.leader not in live:
                dead.append(tp)
            elif el.new_generation or el.leader != d.leader:
                restarted.append(tp)
            else:
                shrinks.append(tp)
        return dead, restarted, shrinks

    async def elect_offline_partitions(self, batch: RequestBatch, *, send: bool) -> None:
        """Partitions without a leader whose replicas are back get one (OfflinePartition →
        OnlinePartition); those with no live ISR member stay offline unless unclean election is
        enabled for their topic."""

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            if d.leader != NO_LEADER or not any(r in self.ctx.live for r in d.replicas):
                return None
            el = self.controller._offline_election(tp, d, self.ctx.live)
            return None if el.leader == NO_LEADER else el

        changes = [tp for tp, d in self.ctx.states.items() if decide(tp, d) is not None]
        if not changes:
            if send:
                self.controller._send(batch)
            return
        written = await self.writer.write_decisions(changes, decide, "offline partitions")
        if written:
            # One line per event, not per partition: a returning broker can bring thousands.
            self.log.info("{n} partitions back online (e.g. {ex})", n=len(written),
                          ex=", ".join(f"{t}-{p} led by {d.leader} at epoch {d.leader_epoch}"
                                       for (t, p), d in list(written.items())[:3]))
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        if send:
            self.controller._send(batch)
