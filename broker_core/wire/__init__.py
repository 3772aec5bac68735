"""Sans-IO Kafka wire codec: framing, headers, primitive types, per-API schemas, error codes and
RecordBatch v2 (``records``). Nothing in this package imports Twisted; the broker, the client
library and the Spark source all use it.
"""
