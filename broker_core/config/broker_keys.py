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

#: The broker's own keys: (Kafka name, attribute, parser, default text, required).
BROKER_OWN_KEYS: dict[str, ConfigKey] = key_table(
    ("broker.id", "broker_id", integer(0, INT_MAX), None, True),
    ("log.dirs", "log_dirs", directories, None, True),
    ("num.partitions", "num_partitions", integer(1, INT_MAX), "1"),
    ("default.replication.factor", "default_replication_factor", integer(1, 32767), "1"),
    ("auto.create.topics.enable", "auto_create_topics_enable", boolean, "true"),
    ("delete.topic.enable", "delete_topic_enable", boolean, "true"),
    ("message.max.bytes", "message_max_bytes", integer(0, INT_MAX), "1048588"),
    ("log.segment.bytes", "log_segment_bytes", integer(14, INT_MAX), "1073741824"),
    ("log.roll.ms", "log_roll_ms", integer(1), None),
    ("log.roll.hours", "log_roll_hours", integer(1, INT_MAX), "168"),
    ("log.retention.ms", "log_retention_ms", integer(-1, what="an integer ≥ -1 (-1: no limit)"),
     None),
    ("log.retention.minutes", "log_retention_minutes",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), None),
    ("log.retention.hours", "log_retention_hours",
     integer(-1, INT_MAX, what="an integer ≥ -1 (-1: no limit)"), "168"),
    ("log.retention.bytes", "log_retention_bytes",
     integer(-1, what="an integer ≥ -1 (-1: no limit)"), "-1"),
    ("log.retention.check.interval.ms", "log_retention_check_interval_ms", integer(1), "300000"),
    ("log.flush.interval.messages", "log_flush_interval_messages", long_or_none(1), None),
    ("log.flush.interval.ms", "log_flush_interval_ms", long_or_none(0), None),
    ("log.flush.scheduler.interval.ms", "log_flush_scheduler_interval_ms", long_or_none(1),
     "1000"),
    ("log.index.interval.bytes", "log_index_interval_bytes", integer(0, INT_MAX), "4096"),
    # With CreateTime, how far a record's timestamp may lie before / after the leader's clock
    # (KIP-937; Kafka 4's defaults: the past unbounded, the future one hour).
    ("log.message.timestamp.before.max.ms", "log_message_timestamp_before_max_ms", integer(0),
     str(LONG_MAX)),
    ("log.message.timestamp.after.max.ms", "log_message_timestamp_after_max_ms", integer(0),
     "3600000"),
    # Rolled segments whose .log stays open at once (an LRU over the broker; docs/storage.md).
    ("log.open.segments.max", "log_open_segments_max", integer(1, INT_MAX), "1000"),
    # Idempotent producers a partition forgets after this long without a batch (Kafka's).
    ("producer.id.expiration.ms", "producer_id_expiration_ms", integer(1), "86400000"),
    ("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms",
     integer(1, INT_MAX), "600000"),
    ("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", integer(0, INT_MAX), "500"),
    ("replica.lag.time.max.ms", "replica_lag_time_max_ms", integer(1), "30000"),
    ("replica.fetch.min.bytes", "replica_fetch_min_bytes", integer(1, INT_MAX), "1"),
    ("replica.fetch.max.bytes", "replica_fetch_max_bytes", integer(0, INT_MAX), "1048576"),
    ("replica.fetch.response.max.bytes", "replica_fetch_response_max_bytes",
     integer(0, INT_MAX), "10485760"),
    ("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", integer(0, INT_MAX), "1000"),
    ("min.insync.replicas", "min_insync_replicas", integer(1, INT_MAX), "1"),
    ("unclean.leader.election.enable", "unclean_leader_election_enable", boolean, "false"),
    ("request.timeout.ms", "request_timeout_ms", integer(0, INT_MAX), "30000"),
    ("controller.socket.timeout.ms", "controller_socket_timeout_ms", integer(1, INT_MAX),
     "30000"),
    # Broker liveness as the controller sees it over the network (docs/replication.md,
    # "Fencing"): a heartbeat every interval; fenced after a session without one.
    ("broker.heartbeat.interval.ms", "broker_heartbeat_interval_ms", integer(1, INT_MAX),
     "2000"),
    ("broker.session.timeout.ms", "broker_session_timeout_ms", integer(1, INT_MAX), "9000"),
    ("fetch.purgatory.purge.interval.requests", "fetch_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000"),
    ("producer.purgatory.purge.interval.requests", "producer_purgatory_purge_interval_requests",
     integer(1, INT_MAX), "1000"),
    ("broker.rack", "broker_rack", optional_text, None),
    ("controlled.shutdown.enable", "controlled_shutdown_enable", boolean, "true"),
    ("controlled.shutdown.max.retries", "controlled_shutdown_max_retries", integer(1, INT_MAX),
     "3"),
    ("controlled.shutdown.retry.backoff.ms", "controlled_shutdown_retry_backoff_ms",
     integer(0, INT_MAX), "5000"),
)
