"""The thin-client requests a coordinator shard answers (docs/coordinator.md):
ClusterMetadata (any broker: :func:`cluster_metadata_answer`), RegisterConsumer (turns the
connection into the coordinator channel), CommitOffsets, UnregisterConsumer (a member leaving:
its final offsets written, the member removed at once) and DescribeConsumerGroups (the
coordinator only).

:class:`ConsumerRequests` checks each request and acts through its
:class:`~coordinator.service.CoordinatorService` (registries, scheduler, committer, rebalance
requests); it keeps no state of its own.

Invariants:

- only the active, unsuspended coordinator of the group's shard changes anything: any other
  broker answers NOT_COORDINATOR naming the shard and its known owner, a suspended one
  COORDINATOR_NOT_AVAILABLE (:meth:`not_coordinator`);
- every refusal changes nothing: a request is checked whole before anything is stored;
- only a member itself may commit or leave: the session id of its live registration, from
  the principal that registered (:meth:`ConsumerRequests._is_own_session`);
- committed offsets only move forward, and only for partitions the member owns.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import MetadataStoreError, TransactionFailed
from broker_core.wire.errors import ErrorCode
from coordinator import initial_rebalance, rebalance, topic_count
from coordinator.assignor import TopicPartition
from coordinator.registry import ConsumerRegistry, DuplicateConsumer, GroupRegistry

if TYPE_CHECKING:
    from coordinator.service import CoordinatorService

log = Logger(namespace="sluice.coordinator")

OFFSET_RESETS = ("smallest", "earliest", "largest", "latest")


def _principal_of(proto: Any) -> str:
    """The principal text of a connection (``User:ANONYMOUS`` when it carries none)."""
    security = getattr(proto, "security", None)
    return "User:ANONYMOUS" if security is None else str(security.principal)


def _error(code: ErrorCode, message: str) -> dict:
    return {"error_code": int(code), "error_message": message}


def not_coordinator_error(broker_id: int, shard: int, owner: int) -> dict:
    """NOT_COORDINATOR from ``broker_id`` for a group of ``shard`` whose known owner is
    ``owner`` (-1: none known)."""
    where = f"broker {owner}" if owner >= 0 else "not elected yet"
    return _error(ErrorCode.NOT_COORDINATOR,
                  f"broker {broker_id} is not the coordinator of the group's shard {shard} "
                  f"(its coordinator is {where}; ask ClusterMetadata v1 with the group id)")


def broker_list(brokers: Iterable[Any], listener: str | None) -> list[dict]:
    """The live ``brokers`` as a client of ``listener`` reaches them (a broker without that
    listener is left out, as Kafka's Metadata does)."""
    out = []
    for b in sorted(brokers, key=lambda b: b.id):
        address = b.address(listener)
        if address is not None:
            out.append({"node_id": b.id, "host": address[0], "port": address[1]})
    return out


def cluster_metadata_answer(coordinator_id: int, brokers: Iterable[Any],
                            listener: str | None, *, unknown: str) -> dict:
    """ClusterMetadata's answer naming ``coordinator_id`` (-1: none; ``unknown`` says why) and
    the live ``brokers``' addresses on ``listener`` (the one the request came on; None: the
    inter-broker addresses)."""
    brokers = list(brokers)
    listed = broker_list(brokers, listener)
    if coordinator_id < 0:
        return {**_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, unknown),
                "coordinator_id": -1, "brokers": listed}
    known = {b.id: b for b in brokers}
    if coordinator_id in known and known[coordinator_id].address(listener) is None:
        return {**_error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"the coordinator (broker {coordinator_id}) has no listener "
                         f"{listener}"),
                "coordinator_id": -1, "brokers": listed}
    return {"error_code": 0, "error_message": None, "coordinator_id": coordinator_id,
            "brokers": listed}


class ConsumerRequests:
    """See the module docstring; ``service`` is the coordinator these requests act on."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service

    # -- the refusal every coordinator-only request starts with ------------------------------------

    def not_coordinator(self) -> dict | None:
        if not self.service.active:
            return not_coordinator_error(self.service.broker_id, self.service.shard,
                                         self.service.elector.leader_id)
        if self.service.elector.suspended:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          "the coordinator lost its ZooKeeper connection; retry shortly")
        return None

    # -- RegisterConsumer --------------------------------------------------------------------------

    def register_consumer(self, header: Any, body: Any, proto: Any) -> dict:
        """Check, register, open the channel, ask for a rebalance."""
        refused = self.not_coordinator() or self._refusal(body)
        if refused is not None:
            return refused
        cid = body.consumer_id
        tc = topic_count.parse(body.topic_count)  # checked by _refusal
        reset = (body.auto_offset_reset or "").lower()
        now = self.service.clock.seconds()
        g_before = self.service.registries.groups.get(body.group_id)
        was_empty = g_before is None or not g_before.members
        # After a failover the group waits for its previous owners (bounded).
        failover_wait = g_before is not None and bool(g_before.expected)
        channel = self.service.channel_factory()
        c = ConsumerRegistry(body.group_id, cid, tc, body.topic_count, bool(body.auto_commit),
                             reset, body.session_timeout_ms, host=getattr(proto, "peer", "?"),
                             channel=channel, registered_at=now,
                             session_id=secrets.randbits(63) or 1,
                             principal=_principal_of(proto))
        try:
            g = self.service.registries.add_member(c, now)
        except DuplicateConsumer:  # pragma: no cover - checked above on the same thread
            return _error(ErrorCode.DUPLICATE_CONSUMER_ID, f"consumer id {cid!r} is taken")
        proto.attach_channel(channel)
        channel.on_lost(lambda: self.service.handle_consumer_failure(c, "disconnect"))
        self.service.scheduler.add(c.key, c.ping_interval_s)
        log.info("consumer {c} registered in group {g} from {peer} (session {t} ms, {tc})",
                 c=cid, g=g.group_id, peer=c.host, t=body.session_timeout_ms,
                 tc=body.topic_count)
        self._hold_rebalance_for_arrivals(g, now, was_empty, failover_wait)
        self.service.request_rebalance(g)
        # session_id is left out of a v0 answer (ignorable): such a member cannot leave early.
        return {"error_code": 0, "error_message": None, "session_id": c.session_id}

    def _refusal(self, body: Any) -> dict | None:
        """The error answer to a RegisterConsumer that cannot be taken (nothing changed), or
        None when it can."""
        cfg = self.service.config
        try:
            paths.validate_group_id(body.group_id)
        except ValueError as e:
            return _error(ErrorCode.INVALID_GROUP_ID, str(e))
        if self.service.kafka.has_members(body.group_id):
            return _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                          f"group {body.group_id!r} is a Kafka consumer group (JoinGroup) with "
                          "members; a group id is of one kind at a time")
        cid = body.consumer_id
        if not cid or len(cid) > 249 or any(ord(c) < 0x20 for c in cid):
            return _error(ErrorCode.INVALID_REQUEST,
                          "consumer id must be 1 to 249 printable characters")
        timeout = body.session_timeout_ms
        if not cfg.min_session_timeout_ms <= timeout <= cfg.max_session_timeout_ms:
            return _error(ErrorCode.INVALID_SESSION_TIMEOUT,
                          f"session_timeout_ms {timeout} is outside the broker's range "
                          f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}] "
                          "(group.min.session.timeout.ms / group.max.session.timeout.ms)")
        try:
            topic_count.parse(body.topic_count)
        except topic_count.InvalidTopicCount as e:
            return _error(ErrorCode.INVALID_TOPIC_COUNT, str(e))
        reset = (body.auto_offset_reset or "").lower()
        if reset not in OFFSET_RESETS:
            return _error(ErrorCode.INVALID_REQUEST,
                          f"auto_offset_reset {body.auto_offset_reset!r} is not one of "
                          f"{', '.join(OFFSET_RESETS)}")
        if self.service.registries.member(body.group_id, cid) is not None:
            return _error(ErrorCode.DUPLICATE_CONSUMER_ID,
                          f"consumer id {cid!r} is already registered in group "
                          f"{body.group_id!r}; pick a unique id (or wait until the previous "
                          "session with this id is detected dead)")
        return None

    def _hold_rebalance_for_arrivals(self, g: Any, now: float, was_empty: bool,
                                     failover_wait: bool) -> None:
        """Set when the rebalance a new member asks for may run (``g.not_before``)."""
        cfg = self.service.config
        if failover_wait:
            if not g.expected and g.delayed_call is not None and g.delayed_call.active():
                # Every previous owner is back: rebalance now instead of waiting out the delay.
                g.delayed_call.cancel()
                g.delayed_call = None
                g.rebalance_initiated = False
                g.not_before = now
            return
        # KIP-134, shortened: the first member of an empty group waits for the rest of a
        # starting group (N members joining cost one rebalance, not N), but only until no
        # one has arrived for the quiet period; the delay bounds the whole wait.
        quiet_s = initial_rebalance.effective_quiet_s(cfg.initial_rebalance_quiet_ms,
                                                      cfg.initial_rebalance_delay_ms)
        if was_empty:
            g.initial_bound, g.not_before = initial_rebalance.opening(
                now, quiet_s, cfg.initial_rebalance_delay_ms / 1000.0)
        elif g.initial_bound is not None:
            g.not_before = initial_rebalance.arrival(now, quiet_s, g.initial_bound,
                                                     g.not_before)
        elif g.rebalancing or g.rebalance_initiated:
            # A join storm outlasting that wait: the running rebalance is superseded
            # (coordinator.rebalance) and the next one waits for arrivals to pause in the
            # same way, so the storm costs a rebalance per pause, not one per arrival.
            g.initial_bound, g.not_before = initial_rebalance.opening(
                now, quiet_s, cfg.initial_rebalance_delay_ms / 1000.0)

    # -- CommitOffsets (active commit) ----------------------------------------------------------

    async def commit_offsets(self, header: Any, body: Any, *, principal: str | None = None,
                             topic_allowed: Callable[[str], bool] | None = None) -> dict:
        """Only the member itself may commit: the request must carry the session id of its
        current registration (v1; a v0 commit cannot prove it and is refused) and come from
        the principal that registered. ``topic_allowed`` (the ACL check) refuses partitions of
        topics the principal may not READ. Any refusal changes nothing."""
        refused = self.not_coordinator()
        if refused is not None:
            return {**refused, "partitions": []}
        c = self.service.registries.member(body.group_id, body.consumer_id)
        if c is None:
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} is not a member of group "
                             f"{body.group_id!r} at this coordinator; register first"),
                    "partitions": []}
        if not self._is_own_session(c, getattr(body, "session_id", 0), principal):
            log.info("refused a commit for consumer {c} of group {g}: not that member's current "
                     "registration", c=body.consumer_id, g=body.group_id)
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} has no registration in group "
                             f"{body.group_id!r} with this session id (CommitOffsets v1) and "
                             "principal; a member can only commit for itself"),
                    "partitions": []}
        return await self._commit_own_offsets(c, body.offsets, topic_allowed)

    async def _commit_own_offsets(self, c: ConsumerRegistry, offsets: Any,
                                  topic_allowed: Callable[[str], bool] | None) -> dict:
        """Commit member ``c``'s own ``offsets``, as CommitOffsets and UnregisterConsumer do:
        check them (:meth:`_check_offsets`), record the accepted ones in its group and write
        them (:meth:`commit_accepted`). Returns the answer: the write's error with no
        partitions, or success with the per-partition results and the problems as its
        message."""
        g = self.service.registries.groups[c.group_id]
        results, accepted, problems = self._check_offsets(c, g, offsets, topic_allowed)
        g.record_offsets(c, ((o.topic, o.partition, o.offset) for o in offsets
                             if (o.topic, o.partition) in accepted))
        failed = await self.commit_accepted(g, accepted)
        if failed is not None:
            return {**failed, "partitions": []}
        return {"error_code": 0, "error_message": "; ".join(problems) or None,
                "partitions": results}

    @staticmethod
    def _is_own_session(c: ConsumerRegistry, session_id: int, principal: str | None) -> bool:
        """Whether a request naming member ``c`` proves to be that member's own: the session
        id of its live registration, from the principal that registered (when known)."""
        if not c.alive or c.session_id == 0:
            return False
        if principal is not None and principal != c.principal:
            return False
        return secrets.compare_digest(c.session_id.to_bytes(8, "big"),
                                      (session_id & (2**64 - 1)).to_bytes(8, "big"))

    def _check_offsets(self, c: ConsumerRegistry, g: GroupRegistry, offsets: Any,
                       topic_allowed: Callable[[str], bool] | None = None
                       ) -> tuple[list[dict], set[TopicPartition], list[str]]:
        """Which of a member's offsets may be committed: only partitions it owns, of topics
        it may READ, never behind the group's offset. Returns (per-partition results,
        accepted, problems)."""
        results = []
        accepted: set[TopicPartition] = set()
        problems = []
        for o in offsets:
            tp = (o.topic, o.partition)
            if topic_allowed is not None and not topic_allowed(o.topic):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                problems.append(f"{o.topic}-{o.partition}: READ on the topic is not allowed")
            elif tp not in c.owned:
                code = ErrorCode.REBALANCE_IN_PROGRESS if g.state == "rebalancing" else \
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                problems.append(f"{o.topic}-{o.partition} is not owned by {c.consumer_id}")
            elif o.offset < g.offsets.get(tp, -1):
                code = ErrorCode.OFFSET_OUT_OF_RANGE
                problems.append(f"{o.topic}-{o.partition}: {o.offset} is behind the group's "
                                f"offset {g.offsets[tp]} (committed offsets only move forward)")
            else:
                code = ErrorCode.NONE
                accepted.add(tp)
            results.append({"topic": o.topic, "partition": o.partition, "error_code": int(code)})
        return results, accepted, problems

    async def commit_accepted(self, g: GroupRegistry, accepted: set[TopicPartition]
                               ) -> dict | None:
        """Write the group's ``accepted`` offsets in the committer's next multi (fenced,
        shared with the commits of other requests that arrived meanwhile); None once they are
        durable, or the error to answer."""
        try:
            await self.service.committer.commit_soon(g, accepted)
        except rebalance.NotCoordinator:
            return _error(ErrorCode.NOT_COORDINATOR, "this broker stopped being the "
                          "coordinator before the offsets were written")
        except (TransactionFailed, MetadataStoreError) as e:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          f"offsets could not be written to ZooKeeper: {e}")
        return None

    # -- UnregisterConsumer (a member leaves) ------------------------------------------------------

    async def unregister_consumer(self, header: Any, body: Any, *,
                                  principal: str | None = None,
                                  topic_allowed: Callable[[str], bool] | None = None) -> dict:
        """A member leaves: check that the request is the member's own (its consumer id and the
        session id of its current registration), take and write its final offsets as
        CommitOffsets does (``topic_allowed`` refuses those of topics the principal may not
        READ), then remove it at once and rebalance its group. Any refusal changes
        nothing; when the offsets cannot be written the member stays (it then hands them over
        on its channel, the way a leave worked before this request existed)."""
        refused = self.not_coordinator()
        if refused is not None:
            return {**refused, "partitions": []}
        c = self.service.registries.member(body.group_id, body.consumer_id)
        if c is None or not self._is_own_session(c, body.session_id, principal):
            log.info("refused a leave for consumer {c} of group {g}: not that member's current "
                     "registration", c=body.consumer_id, g=body.group_id)
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} has no registration in group "
                             f"{body.group_id!r} with this session id; a member can only "
                             "leave itself"), "partitions": []}
        answer = await self._commit_own_offsets(c, body.offsets, topic_allowed)
        if answer["error_code"] != 0:
            return answer  # the offsets are not written: the member stays
        # The member may have failed (its channel closed) while the offsets were written:
        # then it is gone already and counted as such.
        self.service.failures.remove_member(c, "leave", left=True)
        return answer

    # -- DescribeConsumerGroups --------------------------------------------------------------------

    def describe_consumer_groups(self, header: Any, body: Any) -> dict:
        refused = self.not_coordinator()
        if refused is not None:
            return {**refused, "groups": []}
        registries = self.service.registries
        gids = sorted(registries.groups) if body.groups is None else list(body.groups)
        out = []
        for gid in gids:
            g = registries.groups.get(gid)
            if g is None:
                out.append({"group_id": gid, "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND),
                            "state": "dead", "generation_id": -1, "rebalance_failures": 0,
                            "members": [], "offsets": []})
                continue
            members = []
            for m in sorted(g.members.values(), key=lambda m: m.consumer_id):
                threads: dict[str, list[dict]] = {}
                for tp, thread in sorted(m.owned.items()):
                    threads.setdefault(thread, []).append(
                        {"topic": tp[0], "partition": tp[1], "offset": g.offsets.get(tp, -1)})
                members.append({
                    "consumer_id": m.consumer_id, "host": m.host,
                    "topic_count": m.topic_count_text, "session_timeout_ms": m.session_timeout_ms,
                    "auto_commit": m.auto_commit, "failed_pings": m.failed_pings,
                    "ownership": [{"consumer_thread_id": t, "partitions": ps}
                                  for t, ps in sorted(threads.items())]})
            out.append({"group_id": gid, "error_code": 0, "state": g.state,
                        "generation_id": g.generation & 0x7FFFFFFF,
                        "rebalance_failures": g.rebalance_failures, "members": members,
                        "offsets": [{"topic": t, "partition": p, "offset": v}
                                    for (t, p), v in sorted(g.offsets.items())]})
        return {"error_code": 0, "error_message": None, "groups": out}
