"""Typed configuration with Kafka's key names: the broker's, each topic's, and the clients'.

One module per job, each imported by its own name (this package re-exports nothing):

- :mod:`~broker_core.config.parsing`: the machinery every component declares its keys with
  (:class:`~broker_core.config.parsing.ConfigKey`, ``parse_keys``, the value parsers,
  ``ConfigError``, ``parse_decimal``); a client's config is built with it too.
- :mod:`~broker_core.config.properties`: the Java-properties file format.
- the broker's keys, one module per component: :mod:`~broker_core.config.broker_keys` (the
  broker, its log and replication), :mod:`~broker_core.config.listener_keys` (listeners,
  security, connection limits), :mod:`~broker_core.config.metadata_keys` (ZooKeeper or the
  quorum), :mod:`~broker_core.config.coordinator_keys` (the consumer coordinator).
- :mod:`~broker_core.config.broker_config`: ``BROKER_KEYS``, those tables in one, and
  ``BrokerConfig``, the object a broker runs with.
- :mod:`~broker_core.config.topic_keys`: the per-topic keys and their checks.
"""
