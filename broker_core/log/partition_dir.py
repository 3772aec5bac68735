"""Names of partition directories: ``<topic>-<partition>``, and ``<dir>.<id>-delete`` for one
being deleted. A topic name becomes a directory name, so it is checked (Kafka's rule) before
any directory is made from it or parsed back."""

from __future__ import annotations

import re

DELETE_SUFFIX = "-delete"
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_topic_name(topic: str) -> None:
    """Kafka's rule for topic names (which become directory names): 1-249 characters of
    ``[A-Za-z0-9._-]``, not ``.`` or ``..``. Raises ValueError naming the problem."""
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"illegal topic name {topic!r}: use 1-249 characters from "
                         "[A-Za-z0-9._-], not '.' or '..'")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_dir_name(name: str) -> tuple[str, int]:
    """``(topic, partition)`` from a directory name ``<topic>-<partition>``; topics may contain
    ``-``, so the partition is what follows the last one. Raises ValueError."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not part.isascii():
        raise ValueError(f"not a partition directory name: {name!r}")
    check_topic_name(topic)
    return topic, int(part)
