"""Structures shared by Sluice's consumer-coordination APIs (keys 1000 up).

The design was written against Kafka 0.7's framing; Sluice keeps its fields and meaning but frames
them the way every other API is framed (Kafka request/response headers, flexible versions with
tagged fields), so one codec and one server serve all of them. Partitions are ``int32`` (the
original "partition string that already contains the broker id" is a 0.7 artefact).
"""

from __future__ import annotations

from broker_core.wire.schema import INT32, INT64, STRING, Array, Field, Schema

#: A broker of the cluster (the design's ``broker_struct``).
BROKER = Schema("SluiceBroker", [
    Field("node_id", INT32),
    Field("host", STRING),
    Field("port", INT32),
])

#: The design's ``offset_struct`` / ``partition_struct``: the next offset to consume.
PARTITION_OFFSET = Schema("SluicePartitionOffset", [
    Field("topic", STRING),
    Field("partition", INT32),
    Field("offset", INT64),
])

BROKERS = Array(BROKER)
OFFSETS = Array(PARTITION_OFFSET)
