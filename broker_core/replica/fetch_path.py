"""The read path on a leader: a consumer's or a follower's Fetch (``replica_id >= 0``), and
the leader's bookkeeping of what each follower fetched (its log end, which may advance the high
watermark and admit it to the ISR).

Owns no state: the partitions and the fetch purgatory are the
:class:`~broker_core.replica.manager.ReplicaManager`'s. Invariants: a consumer never reads past
the high watermark, a follower reads up to the log end; a fetch answers in request order; a
response never carries more than ``max_bytes`` of records once one partition has data; a fetch
waits (long poll) only while it has fewer than ``min_bytes``, no partition has an error and
``max_wait_ms`` has not passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet import defer

from broker_core.log import OffsetOutOfRange
from broker_core.replica.delayed import DelayedFetch

if TYPE_CHECKING:
    from broker_core.replica.fetch_session import FetchContext
    from broker_core.replica.manager import ReplicaManager
    from broker_core.replica.partition import Partition

#: ``(topic, partition, offset, partition_max_bytes, current_leader_epoch)``
FetchRequest = tuple[str, int, int, int, int]


@dataclass
class FetchResult:
    error: str | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""


class FetchPath:
    """Fetch over ``replicas``' partitions; see the module docstring."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def read(self, topic: str, index: int, offset: int, max_bytes: int, *,
             consumer: bool = True, current_leader_epoch: int = -1) -> FetchResult:
        """See :meth:`ReplicaManager.read`."""
        rm = self.replicas
        p, error = rm.leader_partition(topic, index, current_leader_epoch)
        if p is None:
            return FetchResult(error=error)
        log = p.log
        hw = p.high_watermark
        if (hw <= offset <= log.log_end_offset) if consumer else offset == log.log_end_offset:
            # Nothing to read (the common case of a parked long poll): skip the log.
            return FetchResult(high_watermark=hw, log_start_offset=log.log_start_offset)
        try:
            res = log.read(offset, max_bytes, max_offset=hw if consumer else None)
        except OffsetOutOfRange:
            return FetchResult(error="OFFSET_OUT_OF_RANGE", high_watermark=hw,
                               log_start_offset=log.log_start_offset)
        except OSError as e:
            rm.log.error("read from {t}-{p} failed: {e}", t=topic, p=index, e=e)
            rm.storage_error((topic, index), e, "read")
            return FetchResult(error="KAFKA_STORAGE_ERROR")
        if rm.metrics is not None and res.records:
            rm.metrics.bytes_out_by_topic(topic).inc(len(res.records))
        return FetchResult(high_watermark=hw, log_start_offset=log.log_start_offset,
                           records=res.records)

    def fetch(
        self,
        requests: list[FetchRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        replica_id: int = -1,
        follower_log_starts: Sequence[tuple[str, int, int]] = (),
        session: FetchContext | None = None,
    ) -> defer.Deferred:
        """See :meth:`ReplicaManager.fetch`."""
        rm = self.replicas
        consumer = replica_id < 0
        now = requests
        if not consumer:
            now = self.record_follower_fetches(replica_id, requests, session)
            if follower_log_starts:
                rm._record_follower_log_starts(replica_id, follower_log_starts)

        first, total, errors = self._collect(now, consumer, max_bytes)
        if max_wait_ms <= 0 or total >= min_bytes or errors or not requests:
            return defer.succeed(first)
        # Parked over every partition: news on any of them answers the fetch.
        return self._long_poll(requests, consumer, max_wait_ms, min_bytes, max_bytes,
                               replica_id, session)

    def _quiet(self, replica_id: int, p: Partition, req: FetchRequest,
               session: FetchContext) -> bool:
        """Whether ``req``, a partition of a follower's incremental session fetch that we lead
        at the epoch it names (``p``), is *quiet*: the request does not name it, the follower
        is in its ISR and at our log end, and there is nothing new to answer
        (:meth:`FetchContext.quiet`). Reading it would give a row the answer leaves out, and
        recording its fetch can only say the follower is caught up now.

        A session names every partition the follower follows here (hundreds), and in a
        round only a few have news: skipping the quiet ones is what keeps a fetch's cost with
        the partitions that changed."""
        if replica_id not in p.state.isr:
            return False
        log = p.log
        leo = log.log_end_offset
        if req[2] != leo or not session.quiet((req[0], req[1]), leo, log.high_watermark,
                                               log.log_start_offset):
            return False
        r = p.remotes.get(replica_id)
        return r is not None and r.log_end_offset == leo

    def _news(self, replica_id: int, reqs: list[FetchRequest], session: FetchContext
              ) -> list[FetchRequest]:
        """The partitions of a parked incremental session fetch worth reading as it answers:
        all but the quiet ones (its fetch was recorded on arrival)."""
        partitions = self.replicas.partitions
        me = self.replicas.broker_id
        out = []
        for req in reqs:
            p = partitions.get((req[0], req[1]))
            st = None if p is None else p.state
            if (st is not None and st.leader == me and (req[4] < 0 or req[4] == st.leader_epoch)
                    and self._quiet(replica_id, p, req, session)):
                continue
            out.append(req)
        return out

    def _collect(self, reqs: list[FetchRequest], consumer: bool, max_bytes: int
                 ) -> tuple[list[tuple[str, int, FetchResult]], int, bool]:
        """Read every requested partition now: the answers in request order, the bytes read,
        and whether any partition has an error."""
        rm = self.replicas
        partitions = rm.partitions
        me = rm.broker_id
        out = []
        total = 0
        errors = False
        budget = max_bytes
        for topic, index, offset, part_max, epoch in reqs:
            if not consumer:
                # The common case of a follower's fetch, inlined (what read() decides for
                # it): a partition we lead at the epoch it names, and the follower already
                # at our log end. A fetch session names every partition a follower
                # follows here, thousands after a failover, and most have nothing new.
                p = partitions.get((topic, index))
                st = None if p is None else p.state
                if st is not None and st.leader == me and (
                        epoch < 0 or epoch == st.leader_epoch):
                    log = p.log
                    if offset == log.log_end_offset:
                        out.append((topic, index, FetchResult(
                            high_watermark=log.high_watermark,
                            log_start_offset=log.log_start_offset)))
                        continue
            limit = max(0, min(part_max, budget))
            if limit == 0 and total > 0:
                # Response budget spent: later partitions answer with no data this time.
                res = self._empty(topic, index)
            else:
                res = rm.read(topic, index, offset, limit, consumer=consumer,
                              current_leader_epoch=epoch)
            if res.error is not None:
                errors = True
            out.append((topic, index, res))
            total += len(res.records)
            budget -= len(res.records)
        return out, total, errors

    def _long_poll(self, reqs: list[FetchRequest], consumer: bool, max_wait_ms: int,
                   min_bytes: int, max_bytes: int, replica_id: int = -1,
                   session: FetchContext | None = None) -> defer.Deferred:
        """Park a fetch that found too little in the fetch purgatory; it answers (reading
        again) once ``min_bytes`` are available, a leadership moves, or ``max_wait_ms``
        passes."""
        rm = self.replicas
        partitions = rm.partitions
        me = rm.broker_id
        d: defer.Deferred = defer.Deferred()

        def available() -> int:
            n = 0
            for topic, index, offset, part_max, epoch in reqs:
                p = partitions.get((topic, index))
                st = None if p is None else p.state
                if st is None or st.leader != me or (epoch >= 0 and epoch != st.leader_epoch):
                    return min_bytes  # leadership moved: answer now with the error
                end = p.high_watermark if consumer else p.log.log_end_offset
                if end > offset:
                    if min_bytes <= 1:
                        return min_bytes  # any new batch will do: no need to read it twice
                    n += len(rm.read(topic, index, offset, part_max, consumer=consumer,
                                     current_leader_epoch=epoch).records)
                    if n >= min_bytes:
                        return n
            return n

        def respond() -> None:
            now = reqs
            if session is not None and session.incremental and not consumer:
                now = self._news(replica_id, reqs, session)
            d.callback(self._collect(now, consumer, max_bytes)[0])

        # _collect() just found too little, in this reactor turn: skip the purgatory's first try.
        op = DelayedFetch(max_wait_ms / 1000.0, min_bytes, available, respond, just_checked=True)
        rm.fetch_purgatory.try_complete_else_watch(op, [(r[0], r[1]) for r in reqs])
        return d

    def _empty(self, topic: str, index: int) -> FetchResult:
        p, error = self.replicas.leader_partition(topic, index)
        if p is None:
            return FetchResult(error=error)
        return FetchResult(high_watermark=p.high_watermark,
                           log_start_offset=p.log.log_start_offset)

    # -- replication: the leader's side ----------------------------------------------------------

    def record_follower_fetches(self, replica_id: int, reqs: list[FetchRequest],
                                session: FetchContext | None = None) -> list[FetchRequest]:
        """A follower fetched ``reqs``: its fetch offsets are its log ends. Recording them may
        advance the high watermark and ask the controller to add it to the ISR once it has
        caught up. The requests waiting on the partitions whose HW moved are woken once, after
        every partition is recorded.

        Returns the partitions worth reading: all of ``reqs``, or, for an incremental
        ``session`` fetch, all but the quiet ones (:meth:`_quiet`), whose fetch is recorded
        here as any other and which are then left unread. One walk over the session."""
        rm = self.replicas
        now_ms = rm._now_ms()
        partitions = rm.partitions
        me = rm.broker_id
        pick = session is not None and session.incremental
        out = [] if pick else reqs
        hw_moved = []
        for req in reqs:
            topic, index, offset, _, epoch = req
            # leader_partition() inlined: this runs for every partition of every follower fetch.
            p = partitions.get((topic, index))
            st = None if p is None else p.state
            if st is None or st.leader != me or (epoch >= 0 and epoch != st.leader_epoch):
                if pick:
                    out.append(req)  # read: its answer is the error
                continue
            if pick:
                if self._quiet(replica_id, p, req, session):  # type: ignore[arg-type]
                    p.record_follower_fetch(replica_id, offset, now_ms)  # cannot move the HW
                    continue
                out.append(req)
            if p.record_follower_fetch(replica_id, offset, now_ms):
                hw_moved.append(p.topic_partition)
            if replica_id in st.isr:
                continue  # already in sync: isr_expansion() would say None
            new_isr = p.isr_expansion(replica_id)
            if new_isr is not None:
                rm.log.info("{t}-{p}: broker {r} caught up (log end {o}); asking the "
                            "controller to expand the ISR to {isr}", t=topic, p=index,
                            r=replica_id, o=offset, isr=list(new_isr))
                rm._propose_isr(p, new_isr)
        if hw_moved:
            # One wake for the whole fetch: a parked operation watches every partition of its
            # request (a follower's other fetch, an acks=all produce naming hundreds) and each
            # try walks them all, so waking per partition cost partitions x partitions.
            rm._wake_many(hw_moved)
        return out
