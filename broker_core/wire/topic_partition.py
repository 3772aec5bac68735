"""The one name for a partition everywhere in Sluice: ``(topic, partition index)``.

A plain tuple, not a class: partitions are dict keys and set members on every hot path (the
replica manager, the fetchers, the controller's batches), and a tuple of a str and an int hashes
and compares as fast as Python can. The alias says what the tuple means.
"""

from __future__ import annotations

TopicPartition = tuple[str, int]
