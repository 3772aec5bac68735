"""Schemas of the APIs Sluice serves, in the project's DSL (field layouts follow Kafka's message
specs; names are Kafka's in snake_case). Each ``Message`` states its valid and flexible versions;
:mod:`broker_core.wire.apis` decides which of them are advertised.
"""

from __future__ import annotations

from broker_core.wire.schema import Field as F
from broker_core.wire.schema import Message, single

# -- ApiVersions (18) ---------------------------------------------------------------------------

API_VERSIONS_REQUEST = Message("ApiVersionsRequest", [
    F("client_software_name", "string", "3+"),
    F("client_software_version", "string", "3+"),
], valid="0-3", flexible="3+")

API_VERSIONS_RESPONSE = Message("ApiVersionsResponse", [
    F("error_code", "int16"),
    F("api_keys", [F("api_key", "int16"), F("min_version", "int16"), F("max_version", "int16")]),
    F("throttle_time_ms", "int32", "1+"),
    F("supported_features", [F("name", "string"), F("min_version", "int16"),
                             F("max_version", "int16")], "3+", tag=0),
    F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
    F("finalized_features", [F("name", "string"), F("max_version_level", "int16"),
                             F("min_version_level", "int16")], "3+", tag=2),
    F("zk_migration_ready", "bool", "3+", tag=3, default=False),
], valid="0-3", flexible="3+")

# -- Metadata (3) -------------------------------------------------------------------------------

METADATA_REQUEST = Message("MetadataRequest", [
    F("topics", [F("topic_id", "uuid", "10+"), F("name", "string", nullable="10+")],
      nullable="1+"),
    F("allow_auto_topic_creation", "bool", "4+", default=True),
    F("include_cluster_authorized_operations", "bool", "8-10"),
    F("include_topic_authorized_operations", "bool", "8+"),
], valid="0-12", flexible="9+")

METADATA_RESPONSE = Message("MetadataResponse", [
    F("throttle_time_ms", "int32", "3+"),
    F("brokers", [F("node_id", "int32"), F("host", "string"), F("port", "int32"),
                  F("rack", "string", "1+", nullable="1+", default=None)]),
    F("cluster_id", "string", "2+", nullable="2+", default=None),
    F("controller_id", "int32", "1+", default=-1),
    F("topics", [
        F("error_code", "int16"),
        F("name", "string", nullable="12+"),
        F("topic_id", "uuid", "10+"),
        F("is_internal", "bool", "1+", default=False),
        F("partitions", [
            F("error_code", "int16"),
            F("partition_index", "int32"),
            F("leader_id", "int32"),
            F("leader_epoch", "int32", "7+", default=-1),
            F("replica_nodes", "[]int32"),
            F("isr_nodes", "[]int32"),
            F("offline_replicas", "[]int32", "5+"),
        ]),
        F("topic_authorized_operations", "int32", "8+", default=-2147483648),
    ]),
    F("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
], valid="0-12", flexible="9+")

# -- Produce (0) --------------------------------------------------------------------------------

PRODUCE_REQUEST = Message("ProduceRequest", [
    F("transactional_id", "string", "3+", nullable="3+", default=None),
    F("acks", "int16"),
    F("timeout_ms", "int32"),
    F("topic_data", [
        F("name", "string"),
        F("partition_data", [F("index", "int32"), F("records", "records", nullable="0+")]),
    ]),
], valid="0-9", flexible="9+")

PRODUCE_RESPONSE = Message("ProduceResponse", [
    F("responses", [
        F("name", "string"),
        F("partition_responses", [
            F("index", "int32"),
            F("error_code", "int16"),
            F("base_offset", "int64"),
            F("log_append_time_ms", "int64", "2+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("record_errors", [F("batch_index", "int32"),
                                F("batch_index_error_message", "string", nullable="8+",
                                  default=None)], "8+", ignorable=True),
            F("error_message", "string", "8+", nullable="8+", default=None, ignorable=True),
        ]),
    ]),
    F("throttle_time_ms", "int32", "1+"),
], valid="0-9", flexible="9+")

# -- Fetch (1) ----------------------------------------------------------------------------------

FETCH_REQUEST = Message("FetchRequest", [
    F("cluster_id", "string", "12+", nullable="12+", default=None, tag=0),
    F("replica_id", "int32", "0-14", default=-1),
    F("max_wait_ms", "int32"),
    F("min_bytes", "int32"),
    F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    F("isolation_level", "int8", "4+", default=0),
    F("session_id", "int32", "7+", default=0),
    F("session_epoch", "int32", "7+", default=-1),
    F("topics", [
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", [
            F("partition", "int32"),
            F("current_leader_epoch", "int32", "9+", default=-1),
            F("fetch_offset", "int64"),
            F("last_fetched_epoch", "int32", "12+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("partition_max_bytes", "int32"),
        ]),
    ]),
    F("forgotten_topics_data", [F("topic", "string", "7-12"), F("topic_id", "uuid", "13+"),
                                F("partitions", "[]int32")], "7+"),
    F("rack_id", "string", "11+", default=""),
], valid="0-12", flexible="12+")

_EPOCH_END_OFFSET = [F("epoch", "int32", default=-1), F("end_offset", "int64", default=-1)]
_LEADER_ID_AND_EPOCH = [F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1)]
_SNAPSHOT_ID = [F("end_offset", "int64", default=-1), F("epoch", "int32", default=-1)]

FETCH_RESPONSE = Message("FetchResponse", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "7+"),
    F("session_id", "int32", "7+", default=0),
    F("responses", [
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", [
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("high_watermark", "int64"),
            F("last_stable_offset", "int64", "4+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            single("diverging_epoch", _EPOCH_END_OFFSET, "12+", tag=0),
            single("current_leader", _LEADER_ID_AND_EPOCH, "12+", tag=1),
            single("snapshot_id", _SNAPSHOT_ID, "12+", tag=2),
            F("aborted_transactions", [F("producer_id", "int64"), F("first_offset", "int64")],
              "4+", nullable="4+", ignorable=True),
            F("preferred_read_replica", "int32", "11+", default=-1),
            F("records", "records", nullable="0+"),
        ]),
    ]),
], valid="0-12", flexible="12+")

# -- ListOffsets (2) ----------------------------------------------------------------------------

LIST_OFFSETS_REQUEST = Message("ListOffsetsRequest", [
    F("replica_id", "int32"),
    F("isolation_level", "int8", "2+"),
    F("topics", [
        F("name", "string"),
        F("partitions", [
            F("partition_index", "int32"),
            F("current_leader_epoch", "int32", "4+", default=-1),
            F("timestamp", "int64"),
            F("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
], valid="0-7", flexible="6+")

LIST_OFFSETS_RESPONSE = Message("ListOffsetsResponse", [
    F("throttle_time_ms", "int32", "2+"),
    F("topics", [
        F("name", "string"),
        F("partitions", [
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("old_style_offsets", "[]int64", "0", ignorable=True),
            F("timestamp", "int64", "1+", default=-1),
            F("offset", "int64", "1+", default=-1),
            F("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
], valid="0-7", flexible="6+")

# -- CreateTopics (19), DeleteTopics (20), CreatePartitions (37) --------------------------------

CREATE_TOPICS_REQUEST = Message("CreateTopicsRequest", [
    F("topics", [
        F("name", "string"),
        F("num_partitions", "int32"),
        F("replication_factor", "int16"),
        F("assignments", [F("partition_index", "int32"), F("broker_ids", "[]int32")]),
        F("configs", [F("name", "string"), F("value", "string", nullable="0+")]),
    ]),
    F("timeout_ms", "int32", default=60000),
    F("validate_only", "bool", "1+", default=False),
], valid="0-7", flexible="5+")

CREATE_TOPICS_RESPONSE = Message("CreateTopicsResponse", [
    F("throttle_time_ms", "int32", "2+"),
    F("topics", [
        F("name", "string"),
        F("topic_id", "uuid", "7+"),
        F("error_code", "int16"),
        F("error_message", "string", "1+", nullable="0+", default=None, ignorable=True),
        F("topic_config_error_code", "int16", "5+", tag=0),
        F("num_partitions", "int32", "5+", default=-1),
        F("replication_factor", "int16", "5+", default=-1),
        F("configs", [F("name", "string"), F("value", "string", nullable="5+"),
                      F("read_only", "bool"), F("config_source", "int8", default=-1),
                      F("is_sensitive", "bool")], "5+", nullable="5+", ignorable=True),
    ]),
], valid="0-7", flexible="5+")

DELETE_TOPICS_REQUEST = Message("DeleteTopicsRequest", [
    F("topic_names", "[]string", "0-5"),
    F("timeout_ms", "int32"),
], valid="0-5", flexible="4+")

DELETE_TOPICS_RESPONSE = Message("DeleteTopicsResponse", [
    F("throttle_time_ms", "int32", "1+"),
    F("responses", [
        F("name", "string"),
        F("error_code", "int16"),
        F("error_message", "string", "5+", nullable="5+", default=None, ignorable=True),
    ]),
], valid="0-5", flexible="4+")

CREATE_PARTITIONS_REQUEST = Message("CreatePartitionsRequest", [
    F("topics", [
        F("name", "string"),
        F("count", "int32"),
        F("assignments", [F("broker_ids", "[]int32")], nullable="0+"),
    ]),
    F("timeout_ms", "int32"),
    F("validate_only", "bool"),
], valid="0-3", flexible="2+")

CREATE_PARTITIONS_RESPONSE = Message("CreatePartitionsResponse", [
    F("throttle_time_ms", "int32"),
    F("results", [
        F("name", "string"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
    ]),
], valid="0-3", flexible="2+")

# -- inter-broker: LeaderAndIsr (4) v5, StopReplica (5) v3, UpdateMetadata (6) v7 ----------------

LEADER_AND_ISR_REQUEST = Message("LeaderAndIsrRequest", [
    F("controller_id", "int32"),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "2+", default=-1),
    F("type", "int8", "5+"),
    F("topic_states", [
        F("topic_name", "string"),
        F("topic_id", "uuid", "5+"),
        F("partition_states", [
            F("partition_index", "int32"),
            F("controller_epoch", "int32"),
            F("leader", "int32"),
            F("leader_epoch", "int32"),
            F("isr", "[]int32"),
            F("partition_epoch", "int32"),
            F("replicas", "[]int32"),
            F("adding_replicas", "[]int32", "3+", ignorable=True),
            F("removing_replicas", "[]int32", "3+", ignorable=True),
            F("is_new", "bool", "1+", default=False, ignorable=True),
        ]),
    ], "2+"),
    F("live_leaders", [F("broker_id", "int32"), F("host_name", "string"), F("port", "int32")]),
], valid="5", flexible="4+")

LEADER_AND_ISR_RESPONSE = Message("LeaderAndIsrResponse", [
    F("error_code", "int16"),
    F("topics", [
        F("topic_id", "uuid"),
        F("partition_errors", [F("partition_index", "int32"), F("error_code", "int16")]),
    ], "5+"),
], valid="5", flexible="4+")

STOP_REPLICA_REQUEST = Message("StopReplicaRequest", [
    F("controller_id", "int32"),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "1+", default=-1),
    F("topic_states", [
        F("topic_name", "string"),
        F("partition_states", [
            F("partition_index", "int32"),
            F("leader_epoch", "int32", default=-1),
            F("delete_partition", "bool"),
        ]),
    ], "3+"),
], valid="3", flexible="2+")

STOP_REPLICA_RESPONSE = Message("StopReplicaResponse", [
    F("error_code", "int16"),
    F("partition_errors", [F("topic_name", "string"), F("partition_index", "int32"),
                           F("error_code", "int16")]),
], valid="3", flexible="2+")

UPDATE_METADATA_REQUEST = Message("UpdateMetadataRequest", [
    F("controller_id", "int32"),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "5+", default=-1),
    F("topic_states", [
        F("topic_name", "string"),
        F("topic_id", "uuid", "7+"),
        F("partition_states", [
            F("partition_index", "int32"),
            F("controller_epoch", "int32"),
            F("leader", "int32"),
            F("leader_epoch", "int32"),
            F("isr", "[]int32"),
            F("zk_version", "int32"),
            F("replicas", "[]int32"),
            F("offline_replicas", "[]int32", "4+", ignorable=True),
        ]),
    ], "5+"),
    F("live_brokers", [
        F("id", "int32"),
        F("endpoints", [F("port", "int32"), F("host", "string"), F("listener", "string", "3+"),
                        F("security_protocol", "int16")], "1+"),
        F("rack", "string", "2+", nullable="0+", default=None),
    ]),
], valid="7", flexible="6+")

UPDATE_METADATA_RESPONSE = Message("UpdateMetadataResponse", [
    F("error_code", "int16"),
], valid="7", flexible="6+")
