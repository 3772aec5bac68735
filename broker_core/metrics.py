"""The broker's Prometheus metrics, in one registry per broker (injectable for tests), and the
``/metrics`` resource that serves them.

Naming follows Prometheus practice: one ``sluice_`` prefix (``namespace="sluice"``), base units
(seconds, bytes) as suffixes, ``_total`` on counters (the client library appends it), and only
low-cardinality labels (api, error, topic, partition, reason, purgatory; never client ids,
member ids or offsets). ``docs/metrics.md`` lists every metric.

Per-partition gauges are not kept as Gauge children: a custom collector asks a callback for the
current partitions at scrape time, so a deleted or moved partition disappears from the output
instead of lingering with its last value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from twisted.logger import Logger
from twisted.web import pages, resource, server
from twisted.web.server import GzipEncoderFactory

from broker_core.security.basic_auth import BasicAuthUsers, Outcome, challenge
from broker_core.server.connection_limits import REFUSAL_REASONS
from broker_core.server.memory_pool import MemoryPool

log = Logger(namespace="sluice.metrics")

NAMESPACE = "sluice"

#: Request latency buckets (seconds): fine at the low end, where produce and metadata requests
#: live (the client's default buckets start at 5 ms), up to 10 s for fetch long polls.
REQUEST_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)

#: fsync and controller-event durations: same shape, same upper bound.
DURATION_BUCKETS = REQUEST_BUCKETS

#: Rebalance durations: a healthy one takes milliseconds to a couple of seconds; one that waits
#: out a purgatory expiry takes 2/3 of a session timeout per attempt.
REBALANCE_BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120)

#: One row per local partition: (topic, partition, log end offset, bytes on disk, is leader,
#: ISR size, replica count, min.insync.replicas); the last three may be left off (then the
#: partition counts as fully replicated).
PartitionRow = tuple[Any, ...]

ZOOKEEPER_STATES = ("connected", "suspended", "lost")


class PartitionCollector(Collector):
    """Collects ``sluice_log_end_offset``, ``sluice_log_size_bytes`` and
    ``sluice_partitions_led`` from a callback at scrape time.

    Invariant: the output describes exactly the partitions the callback returns at that scrape;
    if the callback raises, the error is logged and the families are exported empty (a scrape
    must not fail because of one component).
    """

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[PartitionRow]] = lambda: ()

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(f"{NAMESPACE}_log_end_offset",
                              "Log end offset (next offset to be written) of a local partition",
                              labels=["topic", "partition"]),
            GaugeMetricFamily(f"{NAMESPACE}_log_size_bytes",
                              "Bytes on disk of a local partition's segments",
                              labels=["topic", "partition"]),
            GaugeMetricFamily(f"{NAMESPACE}_partitions_led",
                              "Partitions this broker is the leader of"),
            GaugeMetricFamily(f"{NAMESPACE}_under_replicated_partitions",
                              "Partitions led here whose ISR is smaller than their replica set"),
            GaugeMetricFamily(f"{NAMESPACE}_under_min_isr_partitions",
                              "Partitions led here whose ISR is below min.insync.replicas "
                              "(acks=all produce fails with NOT_ENOUGH_REPLICAS)"),
        )

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families = self._families()
        leo, size, led, under, under_min = families
        leaders = under_replicated = under_min_isr = 0
        try:
            for row in self.source():
                topic, partition, end_offset, size_bytes, is_leader, *rest = row
                labels = [topic, str(partition)]
                leo.add_metric(labels, end_offset)
                size.add_metric(labels, size_bytes)
                if is_leader:
                    leaders += 1
                    if rest:
                        isr_size, replicas, min_isr = rest
                        under_replicated += isr_size < replicas
                        under_min_isr += isr_size < min_isr
        except Exception:
            log.failure("partition metrics source raised; exporting no partition metrics")
            families = self._families()
            leo, size, led, under, under_min = families
        led.add_metric([], leaders)
        under.add_metric([], under_replicated)
        under_min.add_metric([], under_min_isr)
        return list(families)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        # Declared up front so the registry rejects a second metric with one of these names.
        return list(self._families())


class FollowerLagCollector(Collector):
    """``sluice_follower_lag_messages{topic,partition,replica}``: on the leader, how many
    messages each follower is behind its log end (as of the follower's last fetch), read from a
    callback at scrape time. A follower that has not fetched since this broker became leader
    is not listed."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[tuple[str, int, int, int]]] = lambda: ()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{NAMESPACE}_follower_lag_messages",
                                 "Messages a follower is behind the leader's log end, on the leader",
                                 labels=["topic", "partition", "replica"])

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        try:
            for topic, partition, replica, lag in self.source():
                family.add_metric([topic, str(partition), str(replica)], lag)
        except Exception:
            log.failure("follower lag source raised; exporting no follower lag")
            family = self._family()
        return [family]

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [self._family()]


class LabelledChildren:
    """The children of one labelled metric, looked up once per label values and kept.

    ``metric.labels(...)`` checks and normalises the label values and takes the metric's lock on
    every call (about 3 µs, most of the cost of counting a request), and the produce and fetch
    paths count several times per request. The label values here have low cardinality (API
    names, topics), and a child once created stays in the metric until removed, which Sluice
    never does, so the cache cannot hand out a child the metric no longer exports.
    """

    __slots__ = ("_metric", "_children")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        """The child for these label values, in the metric's label order."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class BrokerMetrics:
    """Every metric one broker exports, registered in ``registry`` (a fresh one by default).

    Invariant: all metrics live in ``self.registry`` and nowhere else (never in the
    process-global ``REGISTRY``), so several brokers, or tests, can share a process.
    Components record through the attributes below; see ``docs/metrics.md`` for each one.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A declaration table, one entry per exported metric grouped by component: long because
        # there are many metrics, not because of logic; splitting it would scatter the list that
        # docs/metrics.md mirrors.
        self.registry = r = registry if registry is not None else CollectorRegistry()
        ns = NAMESPACE
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
        # (standard names, unprefixed): what the load driver reports for the coordinator.
        ProcessCollector(registry=r)

        # Requests (labels: api name; error name for error responses).
        self.requests_total = Counter(
            "requests", "Requests handled, by API", ["api"], namespace=ns, registry=r)
        self.request_errors_total = Counter(
            "request_errors", "Responses carrying an error code, by API and error name",
            ["api", "error"], namespace=ns, registry=r)
        self.request_duration_seconds = Histogram(
            "request_duration_seconds",
            "Time from a request being decoded to its response being ready (fetch includes the "
            "long-poll wait)", ["api"], buckets=REQUEST_BUCKETS, namespace=ns, registry=r)

        # Data in and out.
        self.bytes_in_total = Counter(
            "bytes_in", "Record-batch bytes appended on behalf of producers", ["topic"],
            namespace=ns, registry=r)
        self.bytes_out_total = Counter(
            "bytes_out", "Record-batch bytes returned to fetchers", ["topic"],
            namespace=ns, registry=r)
        self.messages_in_total = Counter(
            "messages_in", "Records appended on behalf of producers", ["topic"],
            namespace=ns, registry=r)

        # Connections.
        self.connections = Gauge(
            "connections", "Open client and inter-broker connections", namespace=ns, registry=r)
        self.disconnects_total = Counter(
            "disconnects", "Connections closed by the broker, by reason (malformed_frame, "
            "frame_too_large, buffer_overflow, idle, request_read_timeout, unknown_api, "
            "unauthenticated_request, sasl_authentication_failed, ...)", ["reason"],
            namespace=ns, registry=r)
        self.connections_refused_total = Counter(
            "connections_refused", "Connections closed at accept for being over a limit, by "
            "reason: max_connections, max_connections_per_ip", ["reason"],
            namespace=ns, registry=r)
        for reason in REFUSAL_REASONS:
            self.connections_refused_total.labels(reason=reason)  # exported as 0 until one
        self.disconnects_total.labels(reason="idle")
        self.request_memory_bytes = Gauge(
            "request_memory_bytes", "Request bytes reserved in the listeners' memory pool "
            "(queued.max.request.bytes): frames being read or not yet dispatched",
            namespace=ns, registry=r)
        self.request_memory_waiting_connections = Gauge(
            "request_memory_waiting_connections", "Connections whose reading is paused until "
            "the memory pool can hold their next frame", namespace=ns, registry=r)
        self.sasl_authentications_total = Counter(
            "sasl_authentications", "SASL authentications finished, by mechanism and result "
            "(success, failure)", ["mechanism", "result"], namespace=ns, registry=r)

        # Controller and ZooKeeper.
        self.active_controller = Gauge(
            "active_controller", "1 while this broker is the active controller, else 0",
            namespace=ns, registry=r)
        self.fenced_brokers = Gauge(
            "fenced_brokers", "Registered brokers the active controller has fenced for want of "
            "heartbeats (0 on brokers that are not the controller)", namespace=ns, registry=r)
        self.controller_unreachable = Gauge(
            "controller_unreachable", "1 while this broker has had no heartbeat answer from the "
            "controller for a whole broker session, else 0", namespace=ns, registry=r)
        self.controller_epoch = Gauge(
            "controller_epoch", "Controller epoch this broker last won or saw",
            namespace=ns, registry=r)
        self.controller_event_queue_size = Gauge(
            "controller_event_queue_size", "Controller events waiting to be handled",
            namespace=ns, registry=r)
        self.controller_event_duration_seconds = Histogram(
            "controller_event_duration_seconds", "Time to handle one controller event",
            buckets=DURATION_BUCKETS, namespace=ns, registry=r)
        self.unclean_leader_elections_total = Counter(
            "unclean_leader_elections", "Leaders elected from outside the ISR (possible data loss)",
            namespace=ns, registry=r)
        self.zookeeper_session_state = Enum(
            "zookeeper_session_state", "State of this broker's ZooKeeper session",
            states=list(ZOOKEEPER_STATES), namespace=ns, registry=r)

        # Log storage.
        self.log_recoveries_total = Counter(
            "log_recoveries", "Partitions recovered after an unclean shutdown",
            namespace=ns, registry=r)
        self.log_truncated_bytes_total = Counter(
            "log_truncated_bytes", "Bytes cut from torn or corrupt log tails during recovery",
            namespace=ns, registry=r)
        self.offline_log_directory_count = Gauge(
            "offline_log_directory_count", "Log directories of this broker taken offline after "
            "an I/O error (Kafka's OfflineLogDirectoryCount)", namespace=ns, registry=r)
        self.log_directory_online = Gauge(
            "log_directory_online", "1 while a log directory is online, 0 once it is offline",
            ["log_dir"], namespace=ns, registry=r)
        self.log_recovery_segments_deleted_total = Counter(
            "log_recovery_segments_deleted",
            "Segments deleted at start because they lay past an invalid batch or a hole",
            namespace=ns, registry=r)
        self.flush_duration_seconds = Histogram(
            "flush_duration_seconds", "Time of one partition flush (write-out and fsync)",
            buckets=DURATION_BUCKETS, namespace=ns, registry=r)

        # Replication.
        self.isr_shrinks_total = Counter(
            "isr_shrinks", "ISR shrinks applied for partitions led here", namespace=ns, registry=r)
        self.isr_expands_total = Counter(
            "isr_expands", "ISR expansions applied for partitions led here",
            namespace=ns, registry=r)

        # Purgatories (filled by track_purgatory).
        self.purgatory_size = Gauge(
            "purgatory_size", "Watch-list entries in a purgatory, including completed operations "
            "not purged yet", ["purgatory"], namespace=ns, registry=r)
        self.purgatory_delayed_operations = Gauge(
            "purgatory_delayed_operations", "Operations waiting in a purgatory for their "
            "condition or timeout", ["purgatory"], namespace=ns, registry=r)

        # Consumer coordinator (docs/coordinator.md). Never labelled by group or
        # member: thousands of groups would be thousands of series.
        # Coordinator shards (docs/coordinator.md#sharding): the gauges are summed over the
        # shards this broker is active for; only the epoch is labelled by shard (bounded by
        # the shard count, at most 1024).
        self.active_coordinator = Gauge(
            "active_coordinator", "1 while this broker is the active coordinator of at least "
            "one coordinator shard, else 0", namespace=ns, registry=r)
        self.coordinator_shards_active = Gauge(
            "coordinator_shards_active", "Coordinator shards this broker is the active "
            "coordinator of", namespace=ns, registry=r)
        self.coordinator_epoch = Gauge(
            "coordinator_epoch", "Epoch of each coordinator shard this broker last won",
            ["shard"], namespace=ns, registry=r)
        self.coordinator_members = Gauge(
            "coordinator_members", "Consumers registered with this broker's active coordinator "
            "shards", namespace=ns, registry=r)
        self.coordinator_groups = Gauge(
            "coordinator_groups", "Consumer groups this broker's active coordinator shards hold "
            "(empty ones included until their grace period ends)", namespace=ns, registry=r)
        self.coordinator_rebalances_total = Counter(
            "coordinator_rebalances", "Group rebalances finished, by result: completed, "
            "unnecessary (assignment already in force), failed (gave up after the retries)",
            ["result"], namespace=ns, registry=r)
        self.coordinator_rebalance_attempts_failed_total = Counter(
            "coordinator_rebalance_attempts_failed", "Rebalance attempts that failed and were "
            "retried or abandoned, by reason", ["reason"], namespace=ns, registry=r)
        self.coordinator_rebalance_duration_seconds = Histogram(
            "coordinator_rebalance_duration_seconds", "Time from a rebalance's start to its "
            "owners being written, retries included", buckets=REBALANCE_BUCKETS,
            namespace=ns, registry=r)
        self.coordinator_rebalance_queue_seconds = Histogram(
            "coordinator_rebalance_queue_seconds", "Time a group's requested rebalance waited "
            "for a free rebalance handler", buckets=REBALANCE_BUCKETS, namespace=ns,
            registry=r)
        self.coordinator_ping_rtt_seconds = Histogram(
            "coordinator_ping_rtt_seconds", "Round trip of a Ping on the coordinator channel",
            buckets=REQUEST_BUCKETS, namespace=ns, registry=r)
        self.coordinator_failed_pings_total = Counter(
            "coordinator_failed_pings", "Pings not answered within 2/3 of the session timeout",
            namespace=ns, registry=r)
        self.coordinator_expired_members_total = Counter(
            "coordinator_expired_members", "Consumers failed by the coordinator, by reason: "
            "ping (too many failed pings), disconnect (channel closed)", ["reason"],
            namespace=ns, registry=r)
        self.coordinator_left_members_total = Counter(
            "coordinator_left_members", "Consumers that left their group with "
            "UnregisterConsumer (a close, not a failure: not counted as expired)",
            namespace=ns, registry=r)
        self.coordinator_offset_commits_total = Counter(
            "coordinator_offset_commits", "Partition offsets written to ZooKeeper", namespace=ns,
            registry=r)

        # The metadata quorum (quorum mode).
        self.metadata_entries_skipped_total = Counter(
            "metadata_entries_skipped", "Committed metadata-log entries this broker's quorum "
            "node could not apply and skipped, by reason: malformed, unsupported_version, "
            "apply_error", ["reason"], namespace=ns, registry=r)

        self.offline_partitions = Gauge(
            "offline_partitions", "Partitions without a leader, as the active controller sees "
            "them (0 on brokers that are not the controller)", namespace=ns, registry=r)

        # Cached children for the per-request paths (LabelledChildren).
        self.requests_by_api = LabelledChildren(self.requests_total)
        self.request_duration_by_api = LabelledChildren(self.request_duration_seconds)
        self.bytes_in_by_topic = LabelledChildren(self.bytes_in_total)
        self.bytes_out_by_topic = LabelledChildren(self.bytes_out_total)
        self.messages_in_by_topic = LabelledChildren(self.messages_in_total)

        # Per-partition gauges, read at scrape time.
        self.partitions = PartitionCollector()
        r.register(self.partitions)
        self.follower_lag = FollowerLagCollector()
        r.register(self.follower_lag)

    def set_partition_source(self, fn: Callable[[], Iterable[PartitionRow]]) -> None:
        """Read per-partition gauges from ``fn()`` at each scrape; it returns
        ``(topic, partition, log_end_offset, size_bytes, is_leader)`` rows for the partitions
        this broker hosts now."""
        self.partitions.source = fn

    def track_request_memory(self, pool: MemoryPool) -> None:
        """Export ``pool``'s bytes in use and waiting connections (read at scrape time)."""
        self.request_memory_bytes.set_function(lambda: pool.in_use)
        self.request_memory_waiting_connections.set_function(lambda: pool.waiting)

    def track_purgatory(self, name: str, *, size: Callable[[], float],
                        delayed: Callable[[], float]) -> None:
        """Export a purgatory's ``size`` and ``delayed`` counts under ``purgatory=name``; the
        callables are read at scrape time. A second call with the same name replaces the first."""
        self.purgatory_size.labels(purgatory=name).set_function(size)
        self.purgatory_delayed_operations.labels(purgatory=name).set_function(delayed)


class MetricsResource(resource.Resource):
    """Serves a registry in the Prometheus text format, or OpenMetrics when the ``Accept`` header
    asks for it, on the reactor thread.

    Unlike ``prometheus_client.twisted.MetricsResource`` it needs no thread pool and does not
    import the global reactor; rendering a few hundred series takes well under a millisecond.
    """

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (Twisted's name)
        accept = request.getHeader(b"accept")
        encoder, content_type = choose_encoder(accept.decode("latin-1") if accept else "")
        request.setHeader(b"Content-Type", content_type.encode("ascii"))
        return encoder(self.registry)


class _Root(resource.Resource):
    """``/``: only ``/metrics`` exists; every other path is a plain 404."""

    def getChild(self, path: bytes, request: Any) -> resource.IResource:  # noqa: N802
        return pages.notFound()


class _BasicAuthGuard(resource.Resource):
    """Every path behind HTTP basic auth (``metrics.basic.auth.file``): 401 with a challenge
    without valid credentials, 429 while full password checks are throttled."""

    def __init__(self, wrapped: resource.Resource, users: BasicAuthUsers) -> None:
        super().__init__()
        self.wrapped = wrapped
        self.users = users

    def getChildWithDefault(self, path: bytes, request: Any) -> resource.IResource:  # noqa: N802
        outcome, _user = self.users.check(request.getHeader(b"authorization"))
        if outcome is Outcome.ALLOWED:
            return self.wrapped.getChildWithDefault(path, request)
        if outcome is Outcome.THROTTLED:
            request.setHeader(b"Retry-After", b"1")
            return pages.errorPage(429, "Too Many Requests", "Too many password checks; retry.")
        request.setHeader(b"WWW-Authenticate", challenge())
        return pages.errorPage(401, "Unauthorized", "Credentials are required.")

    def render(self, request: Any) -> bytes:
        return self.getChildWithDefault(b"", request).render(request)


def metrics_site(registry: CollectorRegistry, users: BasicAuthUsers | None = None
                 ) -> server.Site:
    """A web site serving ``registry`` at ``/metrics`` (gzip when the scraper accepts it);
    every other path is 404. With ``users``, every request must authenticate as one of them
    (HTTP basic auth), before anything else is looked at."""
    root: resource.Resource = _Root()
    root.putChild(b"metrics", resource.EncodingResourceWrapper(
        MetricsResource(registry), [GzipEncoderFactory()]))
    if users is not None:
        root = _BasicAuthGuard(root, users)
    site = server.Site(root)
    site.displayTracebacks = False
    return site
