"""Accumulates the controller's commands per broker and sends one request per broker per type.

Kafka's ``AbstractControllerBrokerRequestBatch``: while handling one event the controller adds
LeaderAndIsr, StopReplica and UpdateMetadata entries for many partitions; ``send`` then issues at
most one LeaderAndIsr, one StopReplica and one UpdateMetadata request to each broker (several
commands travel in one RPC request). StopReplica goes before
LeaderAndIsr, so a partition removed and re-created in the same event ends up created.

Brokers that are sent the same partitions (every broker gets the same UpdateMetadata, and with
as many replicas as brokers the same LeaderAndIsr) share one body: its partition list is built
and encoded once (:class:`~broker_core.wire.schema.Encoded`) and only the per-broker header
fields (the target's broker epoch, the INIT flag) differ. A failover sends 10,000 partitions
to each of three brokers; building and encoding them once instead of three times was a third of
the controller's time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core.metadata_cache import LEADER_DURING_DELETE
from broker_core.wire.apis import ApiKey
from broker_core.wire.messages import leader_and_isr as leader_and_isr_messages
from broker_core.wire.messages import update_metadata as update_metadata_messages
from broker_core.wire.topic_partition import TopicPartition

LEADER_AND_ISR_VERSION = 5
STOP_REPLICA_VERSION = 3
UPDATE_METADATA_VERSION = 7

TYPE_INCREMENTAL = 0
TYPE_FULL = 1  # Kafka's "full" LeaderAndIsr is the design's INIT flag


_LEADER_AND_ISR_TOPICS = leader_and_isr_messages.REQUEST.field_map["topic_states"].type
_UPDATE_METADATA_TOPICS = update_metadata_messages.REQUEST.field_map["topic_states"].type


@dataclass(frozen=True, slots=True)
class PartitionDecision:
    """What the controller decided for one partition (the LeaderAndISR znode plus AR)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int
    #: The leader's broker epoch (registration czxid) when it was made leader; -1 if unknown
    #: (no leader, or state written before this field existed). Leader epochs: if the leader's
    #: registration changes, it restarted, and its leadership needs a new generation.
    leader_broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class LiveBroker:
    id: int
    host: str
    port: int
    rack: str | None
    epoch: int  # the czxid of its registration znode (Kafka's broker epoch, KIP-380)
    #: Every advertised listener as (name, host, port, security protocol id), the
    #: inter-broker one (``host``/``port``) first; empty: one PLAINTEXT listener there.
    endpoints: tuple[tuple[str, str, int, int], ...] = ()

    def update_metadata_endpoints(self) -> list[dict]:
        """UpdateMetadata's endpoints of this broker. The first is always the inter-broker
        listener's: a receiving broker reaches its peers there (the metadata cache's
        ``host``/``port``)."""
        if not self.endpoints:
            return [{"port": self.port, "host": self.host, "listener": "PLAINTEXT",
                     "security_protocol": 0}]
        return [{"port": port, "host": host, "listener": name, "security_protocol": proto}
                for name, host, port, proto in self.endpoints]


class RequestBatch:
    """One event's worth of broker commands; see the module docstring."""

    log = Logger(namespace="sluice.controller")

    def __init__(self, controller_id: int, controller_epoch: int) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._leader_and_isr: dict[int, dict[TopicPartition, tuple[PartitionDecision, bool]]] = (
            defaultdict(dict))
        self._full: set[int] = set()
        self._stop: dict[int, dict[TopicPartition, tuple[int, bool]]] = defaultdict(dict)
        self._metadata: dict[int, dict[TopicPartition, PartitionDecision | None]] = (
            defaultdict(dict))

    def leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition,
                       decision: PartitionDecision, *, is_new: bool = False) -> None:
        for b in brokers:
            self._leader_and_isr[b][tp] = (decision, is_new)

    def full_leader_and_isr(self, broker: int) -> None:
        """Mark the broker's LeaderAndIsr as full (INIT): it names every partition it hosts and the
        broker deletes the ones it does not name."""
        self._full.add(broker)
        self._leader_and_isr.setdefault(broker, {})

    def stop_replica(self, brokers: Iterable[int], tp: TopicPartition, *, leader_epoch: int,
                     delete: bool) -> None:
        for b in brokers:
            self._stop[b][tp] = (leader_epoch, delete)

    def update_metadata(self, brokers: Iterable[int], tp: TopicPartition | None = None,
                        decision: PartitionDecision | None = None) -> None:
        """Queue an UpdateMetadata for ``brokers``: ``tp`` with ``decision`` (``None`` deletes the
        partition from their caches); with no ``tp`` only the broker list is refreshed."""
        for b in brokers:
            entry = self._metadata[b]
            if tp is not None:
                entry[tp] = decision

    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._stop or self._metadata)

    def send(self, live: dict[int, LiveBroker],
             channel_for: Callable[[int], Any]) -> defer.Deferred:
        """Send everything queued to live brokers; fires when every broker has answered.

        Requests to brokers that are not live are dropped: a broker learns its state at startup
        from ZooKeeper at start-up and from the controller's command when it registers.
        """
        sends = []
        for b, parts in self._stop.items():
            if b in live:
                sends.append(self._send(channel_for(b), ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION,
                                        self._stop_body(live[b], parts), b))
        shared = _SharedBodies()
        for b, parts in self._leader_and_isr.items():
            if b in live:
                body = dict(shared.get(parts, lambda p: self._leader_and_isr_shared(p, live)))
                body.update(broker_epoch=live[b].epoch,
                            type=TYPE_FULL if b in self._full else TYPE_INCREMENTAL)
                sends.append(self._send(channel_for(b), ApiKey.LEADER_AND_ISR,
                                        LEADER_AND_ISR_VERSION, body, b))
        shared = _SharedBodies()
        for b, parts in self._metadata.items():
            if b in live:
                body = dict(shared.get(parts, lambda p: self._update_metadata_shared(p, live)))
                body["broker_epoch"] = live[b].epoch
                sends.append(self._send(channel_for(b), ApiKey.UPDATE_METADATA,
                                        UPDATE_METADATA_VERSION, body, b))
        return defer.DeferredList(sends, consumeErrors=True)

    def _send(self, channel: Any, api_key: int, version: int, body: dict, broker: int
              ) -> defer.Deferred:
        d = channel.send(api_key, version, body)

        def check(resp: Any) -> Any:
            code = getattr(resp, "error_code", 0)
            if code:
                self.log.warn("broker {b} answered {api} with error {code}", b=broker,
                              api=ApiKey(api_key).name, code=code)
            return resp

        d.addCallback(check)
        d.addErrback(lambda f: self.log.info("{api} to broker {b} not delivered: {e}",
                                             api=ApiKey(api_key).name, b=broker,
                                             e=f.getErrorMessage()))
        return d

    # -- request bodies (Kafka's schemas at the versions above) -------------------------------

    @staticmethod
    def _group(parts: Iterable[TopicPartition]) -> dict[str, list[int]]:
        topics: dict[str, list[int]] = defaultdict(list)
        for t, p in sorted(parts):
            topics[t].append(p)
        return topics

    def _leader_and_isr_shared(self, parts: dict[TopicPartition, tuple[PartitionDecision, bool]],
                               live: dict[int, LiveBroker]) -> dict:
        """The LeaderAndIsr body for ``parts`` without its per-broker fields, the partition
        list encoded once."""
        body = self._leader_and_isr_body(None, parts, False, live)
        del body["broker_epoch"], body["type"]
        body["topic_states"] = _LEADER_AND_ISR_TOPICS.pre_encode(
            body["topic_states"], LEADER_AND_ISR_VERSION,
            leader_and_isr_messages.REQUEST.is_flexible(LEADER_AND_ISR_VERSION))
        return body

    def _update_metadata_shared(self, parts: dict[TopicPartition, PartitionDecision | None],
                                live: dict[int, LiveBroker]) -> dict:
        """The UpdateMetadata body for ``parts`` without its per-broker field, the partition
        list encoded once."""
        body = self._update_metadata_body(None, parts, live)
        del body["broker_epoch"]
        body["topic_states"] = _UPDATE_METADATA_TOPICS.pre_encode(
            body["topic_states"], UPDATE_METADATA_VERSION,
            update_metadata_messages.REQUEST.is_flexible(UPDATE_METADATA_VERSION))
        return body

    def _leader_and_isr_body(self, target: LiveBroker | None,
                             parts: dict[TopicPartition, tuple[PartitionDecision, bool]],
                             full: bool, live: dict[int, LiveBroker]) -> dict:
        """The whole LeaderAndIsr body for ``target`` (``None``: broker epoch -1)."""
        leaders = {d.leader for d, _ in parts.values() if d.leader in live}
        topic_states = []
        for topic, indexes in self._group(parts).items():
            states = []
            for i in indexes:
                d, is_new = parts[(topic, i)]
                states.append({
                    "partition_index": i,
                    "controller_epoch": d.controller_epoch,
                    "leader": d.leader,
                    "leader_epoch": d.leader_epoch,
                    "isr": list(d.isr),
                    "partition_epoch": d.zk_version,
                    "replicas": list(d.replicas),
                    "adding_replicas": [],
                    "removing_replicas": [],
                    "is_new": is_new,
                })
            topic_states.append({"topic_name": topic, "partition_states": states})
        return {
            "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "broker_epoch": -1 if target is None else target.epoch,
            "type": TYPE_FULL if full else TYPE_INCREMENTAL,
            "topic_states": topic_states,
            "live_leaders": [{"broker_id": live[b].id, "host_name": live[b].host,
                              "port": live[b].port} for b in sorted(leaders)],
        }

    def _stop_body(self, target: LiveBroker, parts: dict[TopicPartition, tuple[int, bool]]
                   ) -> dict:
        return {
            "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "broker_epoch": target.epoch,
            "topic_states": [
                {"topic_name": topic, "partition_states": [
                    {"partition_index": i, "leader_epoch": parts[(topic, i)][0],
                     "delete_partition": parts[(topic, i)][1]} for i in indexes]}
                for topic, indexes in self._group(parts).items()
            ],
        }

    def _update_metadata_body(self, target: LiveBroker | None,
                              parts: dict[TopicPartition, PartitionDecision | None],
                              live: dict[int, LiveBroker]) -> dict:
        """The whole UpdateMetadata body for ``target`` (``None``: broker epoch -1)."""
        topic_states = []
        for topic, indexes in self._group(parts).items():
            states = []
            for i in indexes:
                d = parts[(topic, i)]
                if d is None:
                    states.append({"partition_index": i, "controller_epoch": self.controller_epoch,
                                   "leader": LEADER_DURING_DELETE, "leader_epoch": 0, "isr": [],
                                   "zk_version": 0, "replicas": [], "offline_replicas": []})
                    continue
                states.append({
                    "partition_index": i,
                    "controller_epoch": d.controller_epoch,
                    "leader": d.leader,
                    "leader_epoch": d.leader_epoch,
                    "isr": list(d.isr),
                    "zk_version": d.zk_version,
                    "replicas": list(d.replicas),
                    "offline_replicas": [r for r in d.replicas if r not in live],
                })
            topic_states.append({"topic_name": topic, "partition_states": states})
        return {
            "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "broker_epoch": -1 if target is None else target.epoch,
            "topic_states": topic_states,
            "live_brokers": [
                {"id": b.id, "endpoints": b.update_metadata_endpoints(), "rack": b.rack}
                for b in sorted(live.values(), key=lambda x: x.id)
            ],
        }


class _SharedBodies:
    """Request bodies of one send, built once per distinct partition map: brokers whose maps
    are equal (the same entries: usually the very same decision objects, so comparing is cheap)
    share one body."""

    def __init__(self) -> None:
        self._built: list[tuple[dict, dict]] = []

    def get(self, parts: dict, build: Any) -> dict:
        for seen, body in self._built:
            if seen is parts or seen == parts:
                return body
        body = build(parts)
        self._built.append((parts, body))
        return body


async def first_of(d: defer.Deferred, timeout_s: float, clock: Any) -> None:
    """Wait until ``d`` fires or ``timeout_s`` passes, whichever is first; ``d`` itself is left
    alone (not cancelled, its result untouched)."""
    done: defer.Deferred = defer.Deferred()

    def fire(result: Any = None) -> Any:
        if not done.called:
            done.callback(None)
        return result

    call = clock.callLater(timeout_s, fire)
    d.addBoth(fire)
    try:
        await done
    finally:
        if call.active():
            call.cancel()
