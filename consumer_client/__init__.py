"""The client library applications import: the consumer, the producer, their blocking
wrappers, group membership and the Spark data source.

It imports from ``broker_core`` only the wire codec, the shared config machinery and the shared
client transport (see docs/architecture.md, "Layers"); the operator tools live in
``sluice_tools``.
"""
