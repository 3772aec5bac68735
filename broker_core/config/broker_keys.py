"""The broker's own keys: its id and log directories, topics' defaults, the log (segments,
retention, flushing, timestamps), idempotent producers, replication, the controller's
timings and controlled shutdown."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.config.parsing import (
    INT_MAX,
    LONG_MAX,
    ConfigKey,
    bad_value,
    boolean,
    integer,
    key_table,
    long_or_none,
    optional_text,
    typed,
)
from broker_core.wire.messages.describe_configs import ConfigType


def directories(key: str, raw: str) -> str:
    """``log.dirs``: one or more comma-separated directory paths (Kafka's JBOD, KIP-112), each
    named once; returned comma-joined without blanks (see
    :meth:`~broker_core.config.broker_config.BrokerConfig.log_dir_paths`)."""
    value = raw.strip()
    if not value:
        raise bad_value(key, raw, "a directory path, or several separated by commas")
    parts = [p.strip() for p in value.split(",")]
    if any(not p for p in parts):
        raise bad_value(key, raw, "directory paths separated by commas, none of them empty")
    seen: dict[Path, str] = {}
    for p in parts:
        norm = Path(os.path.normpath(os.path.abspath(p)))
        if norm in seen:
            raise bad_value(key, raw, f"each directory once ({seen[norm]!r} and {p!r} are the same)")
        for other, name in seen.items():
            if norm in other.parents or other in norm.parents:
                raise bad_value(key, raw, f"directories that do not contain each other ({name!r} "
                                     f"and {p!r})")
        seen[norm] = p
    return ",".join(parts)


# Kafka declares it as a list (DescribeConfigs reports its type so).
typed(directories, ConfigType.LIST)

#: The broker's own keys: (Kafka name, attribute, parser, default text, doc, required).
BROKER_OWN_KEYS: dict[str, ConfigKey] = key_table(
    ("broker.id", "broker_id", integer(0, INT_MAX), None,
     "This broker's id, unique in the cluster (an integer ≥ 0).", True),
    ("log.dirs", "log_dirs", directories, None,
     "The broker's log directories, comma-separated (one per disk); each named once and none "
     "inside another.", True),
    ("num.partitions", "num_partitions", integer(1, INT_MAX), "1",
     "Partitions of a topic created automatically or without a partition count (≥ 1)."),
    ("default.replication.factor", "default_replication_factor", integer(1, 32767), "1",
     "Replication factor of a topic created automatically or without one (1 to 32767)."),
    ("auto.create.topics.enable", "auto_create_topics_enable", boolean, "true",
     "Whether a topic that does not exist is created when a client asks for its metadata or "
     "produces to it."),
    ("delete.topic.enable", "delete_topic_enable", boolean, "true",
     "Whether topics may be deleted; when false, DeleteTopics answers TOPIC_DELETION_DISABLED."),
    ("message.max.bytes", "message_max_bytes", integer(0, INT_MAX), "1048588",
     "The largest record batch a producer may send, in bytes, and the most a compressed batch "
     "may decompress to (≥ 0)."),
    ("log.segment.bytes", "log_segment_bytes", integer(14, INT_MAX), "1073741824",
     "The size in bytes at which the active segment is rolled (≥ 14)."),
    ("log.roll.ms", "log_roll_ms", integer(1), None,
     "The age in milliseconds of the active segment's first record at which it is rolled; when "
     "set it wins over log.roll.hours."),
    ("log.roll.hours", "log_roll_hours", integer(1, INT_MAX), "168",
     "As log.roll.ms, in hours; used when log.roll.ms is unset."),
    ("log.retention.ms", "log_retention_ms", integer(-1, what="an integer ≥ -1 (-1: no limit)"),
     None,
     "How long in milliseconds a segment is kept after its newest record (-1: forever); wins "
     "over the minutes and hours keys."),
    ("log.retention.minutes", "log_retention_minutes",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), None,
     "As log.retention.ms, in minutes; used when log.retention.ms is unset (-1: forever)."),
    ("log.retention.hours", "log_retention_hours",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), "168",
     "As log.retention.ms, in hours; used when neither the milliseconds nor the minutes key is "
     "set (-1: forever)."),
    ("log.retention.bytes", "log_retention_bytes",
     integer(-1, what="an integer ≥ -1 (-1: no limit)"), "-1",
     "The size in bytes past which a partition's oldest segments are deleted (-1: no size "
     "limit)."),
    ("log.retention.check.interval.ms", "log_retention_check_interval_ms", integer(1), "300000",
     "How often, in milliseconds, the broker looks for segments to delete."),
    ("log.flush.interval.messages", "log_flush_interval_messages", long_or_none(1), None,
     "fsync a partition after this many records (unset or 9223372036854775807: leave flushing "
     "to the operating system)."),
    ("log.flush.interval.ms", "log_flush_interval_ms", long_or_none(0), None,
     "fsync a partition when its oldest unflushed record is this many milliseconds old (unset: "
     "no time-based flush)."),
    ("log.flush.scheduler.interval.ms", "log_flush_scheduler_interval_ms", long_or_none(1),
     "1000",
     "How often, in milliseconds, the broker checks which partitions are due for a time-based "
     "flush."),
    ("log.index.interval.bytes", "log_index_interval_bytes", integer(0, INT_MAX), "4096",
     "Bytes of batches between two offset-index entries (≥ 0)."),
    # With CreateTime, how far a record's timestamp may lie before / after the leader's clock
    # (KIP-937; Kafka 4's defaults: the past unbounded, the future one hour).
    ("log.message.timestamp.before.max.ms", "log_message_timestamp_before_max_ms", integer(0),
     str(LONG_MAX),
     "With CreateTime, how many milliseconds before the leader's clock a record's timestamp may "
     "lie; a batch with one further back is refused with INVALID_TIMESTAMP."),
    ("log.message.timestamp.after.max.ms", "log_message_timestamp_after_max_ms", integer(0),
     "3600000",
     "With CreateTime, how many milliseconds after the leader's clock a record's timestamp may "
     "lie; a batch with one further ahead is refused with INVALID_TIMESTAMP."),
    # Rolled segments whose .log stays open at once (an LRU over the broker; docs/storage.md).
    ("log.open.segments.max", "log_open_segments_max", integer(1, INT_MAX), "1000",
     "Rolled segments whose log file stays open at once over the whole broker, least recently "
     "read closed first (≥ 1)."),
    # Idempotent producers a partition forgets after this long without a batch (Kafka's).
    ("producer.id.expiration.ms", "producer_id_expiration_ms", integer(1), "86400000",
     "How long in milliseconds a partition remembers an idempotent producer after its last "
     "batch's timestamp."),
    ("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms",
     integer(1, INT_MAX), "600000",
     "How often, in milliseconds, the broker looks for idempotent producers to forget."),
    ("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", integer(0, INT_MAX), "500",
     "The longest, in milliseconds, a follower's fetch waits at the leader for new data."),
    ("replica.lag.time.max.ms", "replica_lag_time_max_ms", integer(1), "30000",
     "A follower that has not caught up with the leader's log end for this many milliseconds "
     "leaves the ISR."),
    ("replica.fetch.min.bytes", "replica_fetch_min_bytes", integer(1, INT_MAX), "1",
     "Bytes a follower's fetch waits for before the leader answers (at most "
     "replica.fetch.wait.max.ms)."),
    ("replica.fetch.max.bytes", "replica_fetch_max_bytes", integer(0, INT_MAX), "1048576",
     "The most bytes a follower asks for per partition in one fetch; a larger first batch still "
     "comes whole."),
    ("replica.fetch.response.max.bytes", "replica_fetch_response_max_bytes",
     integer(0, INT_MAX), "10485760",
     "The most bytes a follower asks for in one fetch, over every partition it follows from "
     "that leader."),
    ("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", integer(0, INT_MAX), "1000",
     "The pause in milliseconds before a follower retries a failed fetch."),
    ("min.insync.replicas", "min_insync_replicas", integer(1, INT_MAX), "1",
     "With acks=all, the in-sync replicas a write needs; fewer answers NOT_ENOUGH_REPLICAS "
     "(≥ 1)."),
    ("unclean.leader.election.enable", "unclean_leader_election_enable", boolean, "false",
     "Whether a replica outside the ISR may become leader when no ISR member is alive, losing "
     "the records it lacks."),
    ("request.timeout.ms", "request_timeout_ms", integer(0, INT_MAX), "30000",
     "Timeout in milliseconds of the requests this broker sends to other brokers (≥ 0)."),
    ("controller.socket.timeout.ms", "controller_socket_timeout_ms", integer(1, INT_MAX),
     "30000",
     "Timeout in milliseconds of the controller's requests to brokers."),
    # Broker liveness as the controller sees it over the network (docs/replication.md,
    # "Fencing"): a heartbeat every interval; fenced after a session without one.
    ("broker.heartbeat.interval.ms", "broker_heartbeat_interval_ms", integer(1, INT_MAX),
     "2000",
     "How often, in milliseconds, the broker sends BrokerHeartbeat to the active controller; "
     "must be below broker.session.timeout.ms."),
    ("broker.session.timeout.ms", "broker_session_timeout_ms", integer(1, INT_MAX), "9000",
     "The controller fences a broker it has had no heartbeat from for this many milliseconds, "
     "moving its leaderships away."),
    ("fetch.purgatory.purge.interval.requests", "fetch_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000",
     "The fetch purgatory sweeps completed requests from its watch lists once more than this "
     "many entries are stale."),
    ("producer.purgatory.purge.interval.requests", "producer_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000",
     "The same as fetch.purgatory.purge.interval.requests, for the acks=all produce purgatory."),
    ("broker.rack", "broker_rack", optional_text, None,
     "This broker's rack or zone, published with its registration (unset: none)."),
    ("controlled.shutdown.enable", "controlled_shutdown_enable", boolean, "true",
     "Whether a clean stop first asks the controller to move this broker's leaderships and take "
     "it out of the ISRs."),
    ("controlled.shutdown.max.retries", "controlled_shutdown_max_retries", integer(1, INT_MAX),
     "3",
     "Attempts at a controlled shutdown, in all, before the broker stops anyway (≥ 1)."),
    ("controlled.shutdown.retry.backoff.ms", "controlled_shutdown_retry_backoff_ms",
     integer(0, INT_MAX), "5000",
     "The pause in milliseconds between two controlled-shutdown attempts."),
)
