"""The consumer coordinator's keys (docs/coordinator.md): group session bounds and sizes,
rebalancing, offset commits, and the coordinator's own handlers and liveness checks."""

from __future__ import annotations

from broker_core.config.parsing import INT_MAX, ConfigKey, integer, key_table

#: The coordinator's keys: (Kafka name, attribute, parser, default text, doc, required).
COORDINATOR_KEYS: dict[str, ConfigKey] = key_table(
    ("group.min.session.timeout.ms", "group_min_session_timeout_ms", integer(1, INT_MAX),
     "6000",
     "The smallest session timeout in milliseconds a consumer may register with; must not "
     "exceed group.max.session.timeout.ms."),
    ("group.max.session.timeout.ms", "group_max_session_timeout_ms", integer(1, INT_MAX),
     "1800000",
     "The largest session timeout in milliseconds a consumer may register with."),
    ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms",
     integer(0, INT_MAX), "3000",
     "The longest, in milliseconds from its first member, that a new group of Sluice's "
     "thin consumers waits before its first rebalance, so members starting together cost one; "
     "also how long members arriving while a group rebalances may hold its next rebalance and "
     "supersede running ones (Kafka-protocol groups: Kafka's meaning)."),
    ("group.initial.rebalance.quiet.ms", "group_initial_rebalance_quiet_ms",
     integer(0, INT_MAX), "200",
     "A new group of Sluice's thin consumers rebalances once no member has registered for "
     "this long (each arrival restarts it), bounded by group.initial.rebalance.delay.ms; so "
     "does a group whose members arrive while it rebalances; a "
     "value above that delay is clamped to it. 200 ms: consumers started together register "
     "within a few round trips of each other, so a storm keeps the window open, while a lone "
     "member gets its partitions within a fraction of a second."),
    ("group.max.size", "group_max_size", integer(1, INT_MAX), "1000",
     "The most members a classic-protocol consumer group may have; a join beyond it gets "
     "GROUP_MAX_SIZE_REACHED."),
    ("rebalance.backoff.ms", "rebalance_backoff_ms", integer(0, INT_MAX), "2000",
     "The pause in milliseconds between two attempts of a failed rebalance."),
    ("rebalance.max.retries", "rebalance_max_retries", integer(1, INT_MAX), "4",
     "Attempts of one rebalance before it is given up until the next membership or topic change "
     "(≥ 1)."),
    ("offsets.commit.interval.ms", "offsets_commit_interval_ms", integer(1, INT_MAX), "5000",
     "How often, in milliseconds, the coordinator writes the offsets consumers reported "
     "(changed ones only)."),
    ("offset.metadata.max.bytes", "offset_metadata_max_bytes", integer(0, 65536), "4096",
     "The longest committed metadata, in characters, an OffsetCommit may carry; longer is "
     "refused with OFFSET_METADATA_TOO_LARGE (0 to 65536)."),
    ("coordinator.rebalance.handlers", "coordinator_rebalance_handlers", integer(1, 1024), "4",
     "How many groups rebalance concurrently (1 to 1024)."),
    ("coordinator.ping.max.failures", "coordinator_ping_max_failures", integer(0, INT_MAX), "1",
     "Expired pings in a row a consumer may have; one more fails it."),
    ("coordinator.empty.group.retention.ms", "coordinator_empty_group_retention_ms",
     integer(0, INT_MAX), "600000",
     "How long in milliseconds an empty group stays in the coordinator's registry before it is "
     "removed (its offsets stay)."),
    ("group.coordinator.shards", "group_coordinator_shards", integer(1, 1024), "12",
     "How many coordinator shards a new cluster spreads its groups over (1 to 1024); the "
     "first broker to start stores it and every broker uses the stored count."),
)
