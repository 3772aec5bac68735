"""Kafka's data path on a broker: Produce, Fetch (a consumer's, and a follower's with
``replica_id >= 0``) and ListOffsets, turned into :class:`ReplicaManager` calls and response
bodies.

WRITE (Produce), READ (a consumer's Fetch) and DESCRIBE (ListOffsets) are asked per topic: a
refused topic is answered TOPIC_AUTHORIZATION_FAILED and the others are still served. A
follower's Fetch is the control plane, authorized as a whole before dispatch
(:mod:`broker_core.server.authorization`).
"""

from __future__ import annotations

from typing import Any

from broker_core.replica.manager import FetchResult, ReplicaManager
from broker_core.server.api_helpers import TOPIC_DENIED, denied_topics, error_code
from broker_core.server.authorization import Access
from broker_core.server.protocol import NO_RESPONSE
from broker_core.wire.apis import ApiKey


class DataApis:
    """Produce, Fetch and ListOffsets over one broker's replicas; :class:`RequestHandler`
    delegates to it."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def produce(self, header: Any, body: Any, access: Access) -> Any:
        acks = body.acks
        if acks not in (0, 1, -1):
            return self._produce_response(body, {}, "INVALID_REQUIRED_ACKS")
        if body.transactional_id is not None:
            return self._produce_response(body, {}, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        denied = denied_topics(access, ApiKey.PRODUCE, (t.name for t in body.topic_data))
        entries = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data
                   if t.name not in denied]
        d = self.replicas.append(acks, body.timeout_ms, entries)
        if acks == 0:
            return NO_RESPONSE
        d.addCallback(lambda results: self._produce_response(body, results, None, denied))
        return d

    def _produce_response(self, body: Any, results: dict, all_error: str | None,
                          denied: frozenset[str] = frozenset()) -> dict:
        responses = []
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                r = results.get((t.name, p.index))
                error = (TOPIC_DENIED if t.name in denied else all_error) if r is None \
                    else r.error
                parts.append({
                    "index": p.index,
                    "error_code": error_code(error),
                    "base_offset": -1 if r is None else r.base_offset,
                    "log_append_time_ms": -1 if r is None else r.log_append_time_ms,
                    "log_start_offset": -1 if r is None else r.log_start_offset,
                    "record_errors": [] if r is None else [
                        {"batch_index": i, "batch_index_error_message": m}
                        for i, m in r.record_errors],
                    "error_message": None if r is None else r.message,
                })
            responses.append({"name": t.name, "partition_responses": parts})
        return {"responses": responses, "throttle_time_ms": 0}

    def fetch(self, header: Any, body: Any, access: Access) -> Any:
        # replica_id >= 0: a follower (our own brokers); -1: a consumer.
        requests = []
        for t in body.topics:
            for p in t.partitions:
                requests.append((t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                 p.current_leader_epoch))
        forgotten = [(t.topic, index) for t in body.forgotten_topics_data
                     for index in t.partitions]
        # KIP-227: an incremental request names only what changed; the session supplies the
        # rest, and the answer leaves out partitions with nothing new.
        ctx = self.replicas.fetch_sessions.context(body.replica_id, body.session_id,
                                                   body.session_epoch, requests, forgotten)
        if ctx.error is not None:
            return {"throttle_time_ms": 0, "error_code": error_code(ctx.error), "session_id": 0,
                    "responses": []}
        # READ per topic, over every partition of the session (not only those this request
        # names): an ACL removed mid-session takes effect at the next fetch. A follower's
        # fetch was authorized as a whole before dispatch.
        entries = ctx.entries
        denied: frozenset[str] = frozenset()
        if body.replica_id < 0:
            denied = denied_topics(access, ApiKey.FETCH, (e[0] for e in entries))
        if denied:
            entries = [e for e in entries if e[0] not in denied]
        # A follower reports its log starts (the partitions it names), for DeleteRecords.
        starts = [] if body.replica_id < 0 else [
            (t.topic, p.partition, p.log_start_offset) for t in body.topics
            for p in t.partitions if p.log_start_offset >= 0]
        d = self.replicas.fetch(entries, max_wait_ms=body.max_wait_ms,
                                min_bytes=body.min_bytes, max_bytes=body.max_bytes,
                                replica_id=body.replica_id, follower_log_starts=starts,
                                session=ctx)
        if denied:
            refused = [(e[0], e[1], FetchResult(error=TOPIC_DENIED)) for e in ctx.entries
                       if e[0] in denied]
            d.addCallback(lambda results: [*results, *refused])
        d.addCallback(lambda results: self._fetch_response(ctx.select(results), ctx.session_id))
        return d

    def _fetch_response(self, results: list, session_id: int = 0) -> dict:
        topics: list[dict] = []
        index: dict[str, dict] = {}
        for topic, partition, r in results:
            entry = index.get(topic)
            if entry is None:
                entry = index[topic] = {"topic": topic, "partitions": []}
                topics.append(entry)
            entry["partitions"].append({
                "partition_index": partition,
                "error_code": error_code(r.error),
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.high_watermark,
                "log_start_offset": r.log_start_offset,
                "aborted_transactions": [],
                "preferred_read_replica": -1,
                "records": r.records,
            })
        # Session id 0 (consumers, sessionless followers) tells the client to send full fetch
        # requests every time (broker_core.replica.fetch_session).
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": session_id,
                "responses": topics}

    # -- ListOffsets ------------------------------------------------------------------------------

    def list_offsets(self, header: Any, body: Any, access: Access) -> dict:
        denied = denied_topics(access, ApiKey.LIST_OFFSETS, (t.name for t in body.topics))
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if t.name in denied:
                    error, ts, offset, epoch = TOPIC_DENIED, -1, -1, -1
                else:
                    error, ts, offset, epoch = self.replicas.list_offset(
                        t.name, p.partition_index, p.timestamp)
                entry = {"partition_index": p.partition_index, "error_code": error_code(error),
                         "timestamp": ts, "offset": offset, "old_style_offsets": []}
                if header.api_version >= 4:  # leader_epoch is not in v1-v3 (nor ignorable)
                    entry["leader_epoch"] = epoch
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}
