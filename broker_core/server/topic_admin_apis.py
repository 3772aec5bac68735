"""Kafka's topic administration on a broker: CreateTopics, DeleteTopics, CreatePartitions,
written to the metadata store through :mod:`broker_core.topic_admin` (the controller does the
rest).

CREATE (on the cluster or the topic), DELETE and ALTER are asked per topic; a refused topic is
answered TOPIC_AUTHORIZATION_FAILED and the others are still handled. With a positive
``timeout_ms`` the answer waits, as Kafka's, until the metadata cache shows the change (or the
timeout passes: the change still happens).
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from broker_core import topic_admin
from broker_core.metadata_cache import MetadataCache
from broker_core.server.api_helpers import denied_topics
from broker_core.server.authorization import Access
from broker_core.server.metadata_waits import MetadataWaits
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode


class TopicAdminApis:
    """The three APIs of the module docstring for one broker; :class:`RequestHandler`
    delegates to it."""

    log = Logger(namespace="sluice.server")

    def __init__(self, *, config: Any, cache: MetadataCache, store: Any,
                 waits: MetadataWaits) -> None:
        self.config = config
        self.cache = cache
        self.store = store
        self.waits = waits

    async def create_topics(self, header: Any, body: Any, access: Access) -> dict:
        results = []
        created = []
        for t in body.topics:
            entry = {"name": t.name, "error_code": 0, "error_message": None,
                     "topic_config_error_code": 0, "num_partitions": -1,
                     "replication_factor": -1, "configs": []}
            assignment = None
            if t.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            partitions = t.num_partitions if t.num_partitions != -1 else self.config.num_partitions
            rf = t.replication_factor if t.replication_factor != -1 else \
                self.config.default_replication_factor
            if not access.may_create_topic(t.name):
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "CREATE on the cluster or on this topic is not allowed"
                results.append(entry)
                continue
            try:
                result = await topic_admin.create_topic(
                    self.store, t.name, partitions, rf, {c.name: c.value for c in t.configs},
                    assignment=assignment, validate_only=body.validate_only)
                entry["num_partitions"] = len(result)
                entry["replication_factor"] = len(next(iter(result.values()))) if result else rf
                if not body.validate_only:
                    created.append(t.name)
            except topic_admin.TopicAdminError as e:
                entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            except Exception as e:
                self.log.failure("CreateTopics {t} failed", t=t.name)
                entry["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                entry["error_message"] = f"could not create topic: {e}"
            results.append(entry)
        if created and body.timeout_ms > 0:
            # Like Kafka, answer once the controller has published leaders for the new topics
            # (or the timeout passes: the topics still get created).
            await self.waits.wait(
                lambda: all(t in self.cache.topics and all(
                    s.leader >= 0 for s in self.cache.topics[t].values()) for t in created),
                body.timeout_ms)
        return {"throttle_time_ms": 0, "topics": results}

    async def delete_topics(self, header: Any, body: Any, access: Access) -> dict:
        names = list(body.topic_names)
        denied = denied_topics(access, ApiKey.DELETE_TOPICS, names)
        results = []
        deleted = []
        for name in names:
            entry = {"name": name, "error_code": 0, "error_message": None}
            if name in denied:
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "DELETE on this topic is not allowed"
            elif not self.config.delete_topic_enable:
                entry["error_code"] = int(ErrorCode.TOPIC_DELETION_DISABLED)
                entry["error_message"] = "delete.topic.enable is false on this broker"
            else:
                try:
                    await topic_admin.delete_topic(self.store, name)
                    deleted.append(name)
                except topic_admin.TopicAdminError as e:
                    entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            results.append(entry)
        if deleted and body.timeout_ms > 0:
            await self.waits.wait(lambda: not any(t in self.cache.topics for t in deleted),
                                  body.timeout_ms)
        return {"throttle_time_ms": 0, "responses": results}

    async def create_partitions(self, header: Any, body: Any, access: Access) -> dict:
        results = []
        waits = []
        denied = denied_topics(access, ApiKey.CREATE_PARTITIONS,
                               (t.name for t in body.topics))
        for t in body.topics:
            entry = {"name": t.name, "error_code": 0, "error_message": None}
            if t.name in denied:
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "ALTER on this topic is not allowed"
                results.append(entry)
                continue
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            try:
                await topic_admin.add_partitions(self.store, t.name, t.count, assignment,
                                                 validate_only=body.validate_only)
                if not body.validate_only:
                    waits.append((t.name, t.count))
            except topic_admin.TopicAdminError as e:
                entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            results.append(entry)
        if waits and body.timeout_ms > 0:
            await self.waits.wait(
                lambda: all(len(self.cache.topics.get(n, {})) >= c for n, c in waits),
                body.timeout_ms)
        return {"throttle_time_ms": 0, "results": results}
