"""Kafka's ApiVersions and Metadata on a broker's client listeners.

Metadata is answered for the listener the request came on: brokers without that listener are
left out, and a partition whose leader lacks it gets LISTENER_NOT_FOUND. Only topics the
principal may DESCRIBE are listed or told to exist; an unknown topic is auto-created when the
broker and the request allow it and the principal may CREATE it. Each topic's partitions are
encoded once per version and listener until the topic or the live brokers change
(:meth:`broker_core.metadata_cache.MetadataCache.derived`).

ApiVersions lists the APIs the handler serves, but not Sluice's own (1000 up) and, to anyone
but a broker, not the control plane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from broker_core import topic_admin
from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from broker_core.security.acl import ResourceType
from broker_core.server.api_helpers import listener_of
from broker_core.server.authentication import ANSWERED_BY_THE_GATE
from broker_core.server.authorization import (
    CONTROL_PLANE,
    RULES,
    Access,
    authorized_operations,
    cluster_authorized_operations,
)
from broker_core.server.metadata_waits import MetadataWaits
from broker_core.wire.apis import SLUICE_API_KEYS_FROM, SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import metadata as metadata_messages

#: The type of a Metadata response topic's ``partitions``: pre-encoded per topic and version.
_METADATA_PARTITIONS = (metadata_messages.RESPONSE.field_map["topics"].type
                        .element.field_map["partitions"].type)

#: Longest a Metadata request waits for a just-started broker's first UpdateMetadata. It must
#: outlast the wait for a crashed predecessor's ZooKeeper session to expire before this broker
#: can register (up to a session timeout, 18 s by default): answering earlier with the cold,
#: empty cache is what makes clients drop every connection and re-send written requests.
METADATA_WARMUP_MS = 30000


class MetadataApis:
    """ApiVersions and Metadata for one broker; :class:`RequestHandler` delegates to it.
    ``cluster_id`` gives the id as the broker knows it (it learns it after start-up);
    ``serves`` says whether the handler dispatches an API."""

    log = Logger(namespace="sluice.server")

    def __init__(self, *, config: Any, cache: MetadataCache, store: Any, waits: MetadataWaits,
                 cluster_id: Callable[[], str], serves: Callable[[ApiKey], bool]) -> None:
        self.config = config
        self.cache = cache
        self.store = store
        self.waits = waits
        self.cluster_id = cluster_id
        self.serves = serves

    def api_versions(self, header: Any, body: Any, access: Access) -> dict:
        # Sluice-only APIs (1000 up) are left out: Kafka clients need not see them; the
        # control plane is shown to brokers only. SASL's are answered before the handler, on
        # every listener (as Kafka lists them).
        hidden = () if access.security.is_broker else CONTROL_PLANE
        return {
            "error_code": 0,
            "api_keys": [
                {"api_key": int(k), "min_version": s.min_version, "max_version": s.max_version}
                for k, s in sorted(SUPPORTED.items())
                if (self.serves(k) or k in ANSWERED_BY_THE_GATE)
                and k < SLUICE_API_KEYS_FROM and k not in hidden
            ],
            "throttle_time_ms": 0,
        }

    def brokers_on(self, listener: str | None) -> list[tuple[BrokerEndpoint, tuple[str, int]]]:
        """The live brokers that have ``listener``, with their address there, by id (Kafka
        leaves a broker without the listener out of the answer)."""
        found = []
        for b in sorted(self.cache.brokers.values(), key=lambda b: b.id):
            address = b.address(listener)
            if address is not None:
                found.append((b, address))
        return found

    async def metadata(self, header: Any, body: Any, access: Access) -> dict:
        """Kafka's Metadata, answered for the listener the request came on: the brokers'
        addresses on that listener; a partition whose leader lacks it gets
        LISTENER_NOT_FOUND. Only topics the principal may DESCRIBE are listed."""
        listener = listener_of(access)
        if self.cache.controller_epoch < 0:
            # Just started: no UpdateMetadata yet, so the cache knows no brokers. An empty broker
            # list makes clients drop their connections to every broker, failing (and with
            # librdkafka re-sending) requests that were already written; wait for the
            # controller's first update instead (it follows our registration at once).
            await self.waits.wait(lambda: self.cache.controller_epoch >= 0,
                                  METADATA_WARMUP_MS)
        requested = body.topics
        names: list[str]
        describe = RULES[ApiKey.METADATA]
        if requested is None:
            # Only the topics the principal may DESCRIBE (Kafka's all-topics answer).
            names = [t for t in sorted(self.cache.topics) if access.allows_topic(describe, t)]
        else:
            names = [t.name for t in requested if t.name is not None]
        auto = (header.api_version < 4 or body.allow_auto_topic_creation) and \
            self.config.auto_create_topics_enable
        version = header.api_version
        # Only for the topics described (as Kafka: a refused or unknown one is INT32_MIN).
        topic_operations_asked = version >= 8 and body.include_topic_authorized_operations
        topics = []
        for name in names:
            parts = self.cache.topics.get(name)
            described = access.allows_topic(describe, name)
            if parts is None:
                creatable = auto and access.may_create_topic(name)
                if not described and not creatable:
                    # Whether it exists is not told to whom may not DESCRIBE it.
                    topics.append(self._topic_denied_metadata(name))
                    continue
                topics.append(await self._unknown_topic_metadata(name, creatable))
                continue
            if not described:
                topics.append(self._topic_denied_metadata(name))
                continue
            topics.append({
                "error_code": 0,
                "name": name,
                "is_internal": False,
                # Encoded once per topic and version until the topic or the live brokers change:
                # during a failover clients ask for every partition many times a second.
                "partitions": self.cache.derived(
                    name, ("metadata", version, listener),
                    lambda parts=parts: _METADATA_PARTITIONS.pre_encode(
                        [self._partition_metadata(i, st, listener)
                         for i, st in sorted(parts.items())],
                        version, metadata_messages.RESPONSE.is_flexible(version))),
                "topic_authorized_operations": authorized_operations(
                    access, ResourceType.TOPIC, name, topic_operations_asked),
            })
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, (host, port) in self.brokers_on(listener)],
            "cluster_id": self.cluster_id(),
            "controller_id": self.cache.controller_id,
            "topics": topics,
            # v8-v10 only (later versions ask DescribeCluster).
            "cluster_authorized_operations": cluster_authorized_operations(
                access, 8 <= version <= 10 and body.include_cluster_authorized_operations),
        }

    def _partition_metadata(self, index: int, st: PartitionState, listener: str | None) -> dict:
        error = 0
        leader = self.cache.brokers.get(st.leader)
        if st.leader < 0 or leader is None:
            error = int(ErrorCode.LEADER_NOT_AVAILABLE)
        elif leader.address(listener) is None:
            # Kafka's answer: the leader is alive but a client of this listener cannot reach it.
            error, leader = int(ErrorCode.LISTENER_NOT_FOUND), None
        return {
            "error_code": error,
            "partition_index": index,
            "leader_id": st.leader if leader is not None else -1,
            "leader_epoch": st.leader_epoch,
            "replica_nodes": list(st.replicas),
            "isr_nodes": list(st.isr),
            "offline_replicas": [r for r in st.replicas if r not in self.cache.brokers],
        }

    @staticmethod
    def _topic_denied_metadata(name: str) -> dict:
        return {"name": name, "is_internal": False, "partitions": [],
                "topic_authorized_operations": -2147483648,
                "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)}

    async def _unknown_topic_metadata(self, name: str, auto_create: bool) -> dict:
        entry = {"name": name, "is_internal": False, "partitions": [],
                 "topic_authorized_operations": -2147483648}
        if not auto_create:
            return {**entry, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        try:
            await topic_admin.create_topic(
                self.store, name, self.config.num_partitions,
                self.config.default_replication_factor, {})
            self.log.info("auto-created topic {t}", t=name)
            code = ErrorCode.LEADER_NOT_AVAILABLE  # clients retry until the leaders are known
        except topic_admin.TopicExists:
            code = ErrorCode.LEADER_NOT_AVAILABLE
        except topic_admin.TopicAdminError as e:
            self.log.info("auto-creation of topic {t} refused: {e}", t=name, e=e)
            code = ErrorCode(e.error_code)
        except Exception as e:  # ZooKeeper unreachable and the like
            self.log.warn("auto-creation of topic {t} failed: {e}", t=name, e=e)
            code = ErrorCode.LEADER_NOT_AVAILABLE
        return {**entry, "error_code": int(code)}
