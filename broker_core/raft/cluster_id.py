"""Which cluster id a quorum node starts with (docs/design.md#bootstrapping).

The first leader of an empty log writes the cluster id into the first VoterAssignment, and
every quorum request carrying another id is refused (INCONSISTENT_CLUSTER_ID). So every node
of a quorum must start with the same id, and only one node may make one up: the
**bootstrapping voter**, a fresh node (no quorum-state file, empty log) that is the only voter
of ``--quorum-voters``, as in the bootstrapping example. Several fresh voters would
each make up a different id and never form a quorum, so they must be given one.

:func:`resolve_cluster_id` is pure: the caller reads the quorum-state file and the log.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Collection

from broker_core.config.quorum import RaftConfigError


def generate_cluster_id() -> str:
    """A new cluster id as Kafka makes them (``kafka-storage random-uuid``): a random UUID in
    URL-safe base64 without padding, 22 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def resolve_cluster_id(given: str | None, persisted: str | None, log_empty: bool,
                       node_id: int, voters: Collection[int]) -> tuple[str, bool]:
    """``(cluster_id, generated)`` for a node starting with ``--cluster-id given`` (or
    ``None``), the id of its quorum-state file (``None``: no file), whether its log is empty,
    and the bootstrap voters. Raises :class:`RaftConfigError` saying what to pass.

    - a persisted id wins, and a different ``given`` one is refused (the node's log and votes
      belong to that cluster);
    - otherwise ``given`` is used;
    - otherwise a fresh node that is the only bootstrap voter generates one;
    - anything else needs ``--cluster-id``.
    """
    if persisted is not None:
        if given is not None and given != persisted:
            raise RaftConfigError(f"--cluster-id {given!r} does not match {persisted!r}, the "
                                  "cluster this node's data directory belongs to")
        return persisted, False
    if given is not None:
        if not given.strip():
            raise RaftConfigError("--cluster-id must not be empty")
        return given, False
    if not log_empty:
        raise RaftConfigError("the log is not empty but there is no quorum-state file: pass "
                              "the cluster's --cluster-id")
    if set(voters) == {node_id}:
        return generate_cluster_id(), True
    raise RaftConfigError(
        "--cluster-id is needed: only a fresh node that is the sole voter of --quorum-voters "
        "makes one up; pass the id that node printed (its 'cluster-id' event and log line)")
