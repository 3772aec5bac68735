"""The seams of the broker, as ``zope.interface`` interfaces."""

from __future__ import annotations

from zope.interface import Attribute, Interface


class IMetadataStore(Interface):
    """Versioned hierarchical metadata (ZooKeeper first, the Raft quorum later).

    Every method returns a Deferred that fires on the reactor thread; failures are the
    exceptions of :mod:`broker_core.metadata`, never the backing client's. Watch and state
    callbacks are also called on the reactor thread, one at a time.
    """

    state = Attribute("The current SessionState.")
    session_id = Attribute("The session's id (ephemeral owner of our nodes), or None.")

    def start():
        """Connect; fails with ConnectionLost naming the hosts when unreachable in time."""

    def stop():
        """Close the session; its ephemeral nodes go."""

    def get(path):
        """Fire with ``(value: bytes, stat: Stat)``; NoNode if absent."""

    def get_many(paths):
        """Fire with one ``(value, stat)`` or ``None`` (absent) per path, in order: many reads
        answered together (a controller loading thousands of partition states)."""

    def exists(path):
        """Fire with a Stat or None."""

    def get_children(path):
        """Fire with the list of child names; NoNode if absent."""

    def create(path, value=b"", ephemeral=False, sequence=False, makepath=False):
        """Fire with the created path; NodeExists / NoNode (parent) on failure."""

    def set(path, value, version=-1):
        """Conditional when ``version`` >= 0 (BadVersion on mismatch); fires with the Stat."""

    def delete(path, version=-1, recursive=False):
        """Delete a node (and its children when ``recursive``)."""

    def ensure_path(path):
        """Create ``path`` and its parents where missing."""

    def multi(ops):
        """Apply Check/Create/SetData/Delete atomically; TransactionFailed if any fails."""

    def watch_data(path, callback):
        """Call ``callback(data, stat)`` now and on every change (``None, None`` while absent);
        return an object with ``cancel()``."""

    def watch_children(path, callback):
        """Call ``callback(children)`` now and on every change (``None`` while the node is
        absent); return an object with ``cancel()``."""

    def add_state_listener(callback):
        """``callback(SessionState)`` on every session state change."""

    def remove_state_listener(callback):
        """Stop calling ``callback``."""
