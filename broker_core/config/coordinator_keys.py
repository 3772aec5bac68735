"""The consumer coordinator's keys (docs/coordinator.md): group session bounds and sizes,
rebalancing, offset commits, and the coordinator's own handlers and liveness checks."""

from __future__ import annotations

from broker_core.config.parsing import INT_MAX, ConfigKey, integer, key_table

#: The coordinator's keys: (Kafka name, attribute, parser, default text, required).
COORDINATOR_KEYS: dict[str, ConfigKey] = key_table(
    ("group.min.session.timeout.ms", "group_min_session_timeout_ms", integer(1, INT_MAX),
     "6000"),
    ("group.max.session.timeout.ms", "group_max_session_timeout_ms", integer(1, INT_MAX),
     "1800000"),
    ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms",
     integer(0, INT_MAX), "3000"),
    ("group.max.size", "group_max_size", integer(1, INT_MAX), "1000"),
    ("rebalance.backoff.ms", "rebalance_backoff_ms", integer(0, INT_MAX), "2000"),
    ("rebalance.max.retries", "rebalance_max_retries", integer(1, INT_MAX), "4"),
    ("offsets.commit.interval.ms", "offsets_commit_interval_ms", integer(1, INT_MAX), "5000"),
    ("offset.metadata.max.bytes", "offset_metadata_max_bytes", integer(0, 65536), "4096"),
    ("coordinator.rebalance.handlers", "coordinator_rebalance_handlers", integer(1, 1024), "4"),
    ("coordinator.ping.max.failures", "coordinator_ping_max_failures", integer(0, INT_MAX), "1"),
    ("coordinator.empty.group.retention.ms", "coordinator_empty_group_retention_ms",
     integer(0, INT_MAX), "600000"),
)
