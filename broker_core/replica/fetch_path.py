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
            if session is not None and session.incremental:
                now = self._with_news(replica_id, requests, session)
            self.record_follower_fetches(replica_id, now)
            if follower_log_starts:
                rm._record_follower_log_starts(replica_id, follower_log_starts)

        first, total, errors = self._collect(now, consumer, max_bytes)
        if max_wait_ms <= 0 or total >= min_bytes or errors or not requests:
            return defer.succeed(first)
        # Parked over every partition: news on any of them answers the fetch.
        return self._long_poll(requests, consumer, max_wait_ms, min_bytes, max_bytes,
                               replica_id, session)

    def _with_news(self, replica_id: int, reqs: list[FetchRequest], session: FetchContext,
                   *, record: bool = True) -> list[FetchRequest]:
        """The partitions of a follower's incremental session fetch that are worth reading now.

        A session names every partition the follower follows here (hundreds), and in a round
        only a few have news. A partition the request does not name, that we lead at the epoch
        it names, with the follower in its ISR at our log end and nothing new to answer
        (:meth:`FetchContext.quiet`), is left out: its fetch is recorded here as the full path
        would record it (caught up now; it cannot move the HW) and reading it would give a row
        the response leaves out. Everything else, including every partition with an error to
        report, goes through the full path. One pass, no allocation per quiet partition.
        ``record=False`` (a parked fetch answering later: its fetch was recorded on arrival)
        only picks the partitions."""
        rm = self.replicas
        partitions = rm.partitions
        me = rm.broker_id
        now_ms = rm._now_ms()
        quiet = session.quiet
        out = []
        for req in reqs:
            topic, index, _, _, epoch = req
            p = partitions.get((topic, index))
            st = None if p is None else p.state
            if (st is not None and st.leader == me and (epoch < 0 or epoch == st.leader_epoch)
                    and replica_id in st.isr):
                log = p.log
                leo = log.log_end_offset
                if quiet((topic, index), leo, log.high_watermark, log.log_start_offset):
                    r = p.remotes.get(replica_id)
                    if r is not None and r.log_end_offset == leo:
                        if record:
                            p.record_follower_fetch(replica_id, leo, now_ms)
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
                now = self._with_news(replica_id, reqs, session, record=False)
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

    def record_follower_fetches(self, replica_id: int, reqs: list[FetchRequest]) -> None:
        """A follower fetched ``reqs``: its fetch offsets are its log ends. Recording them may
        advance the high watermark and ask the controller to add it to the ISR once it has
        caught up. The requests waiting on the partitions whose HW moved are woken once, after
        every partition is recorded."""
        rm = self.replicas
        now_ms = rm._now_ms()
        partitions = rm.partitions
        me = rm.broker_id
        hw_moved = []
        for topic, index, offset, _, epoch in reqs:
            # leader_partition() inlined: this runs for every partition of every follower fetch.
            p = partitions.get((topic, index))
            st = None if p is None else p.state
            if st is None or st.leader != me or (epoch >= 0 and epoch != st.leader_epoch):
                continue
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
