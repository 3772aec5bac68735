"""When the producer refreshes its metadata: one refresh at a time, coalesced, backed off.

:class:`MetadataRefresher` is the producer's collaborator that asks the brokers about the
topics in use (Metadata, letting the broker auto-create a missing topic as Kafka's producers
do) and hands each answer to the producer (``Producer._apply``), which updates its partition
and leader tables and wakes the sends and waits parked for them.

Invariants: at most one refresh is in flight; a refresh asked for during one makes exactly one
more afterwards; two refreshes start at least ``retry.backoff.ms`` apart; after an answer the
next one is due ``metadata.max.age.ms`` later at the latest; nothing starts once the producer
stopped. ``error`` says why the latest refresh got no answer (None: it got one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from consumer_client.producer_errors import AuthenticationFailed
from consumer_client.security import AUTHENTICATION_ERRORS

if TYPE_CHECKING:
    from consumer_client.producer import Producer


class MetadataRefresher:
    """Refreshes the metadata of the topics ``producer`` uses (see the module docstring)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        #: Why the latest metadata refresh got no answer (None: it got one).
        self.error: str | None = None
        self._wanted: set[str] = set()
        self._refreshing = False
        self._again = False
        self._last = float("-inf")
        self._call: Any = None
        self._age_call: Any = None

    def cancel(self) -> None:
        """Stop the pending refresh and the age timer (the producer stopped)."""
        for call in (self._call, self._age_call):
            if call is not None and call.active():
                call.cancel()

    def want(self, topic: str) -> None:
        if topic not in self._wanted:
            self._wanted.add(topic)
        self.request_refresh()

    def request_refresh(self) -> None:
        """Refresh the metadata of every topic in use: now, or ``retry.backoff.ms`` after the
        last refresh; one refresh at a time, requests during one coalesce into one more."""
        p = self._producer
        if p._stopped:
            return
        if self._refreshing:
            self._again = True
            return
        if self._call is not None and self._call.active():
            return
        delay = max(0.0, self._last + p._backoff_s - p._clock.seconds())
        self._call = p._clock.callLater(delay, self._start_refresh)

    def _start_refresh(self) -> None:
        p = self._producer
        self._refreshing = True
        d = defer.Deferred.fromCoroutine(self._refresh())
        d.addErrback(lambda f: p.log.failure("metadata refresh failed", f))

    async def _refresh(self) -> None:
        p = self._producer
        topics = sorted(self._wanted)
        try:
            # Kafka's producers let the broker create a missing topic (per its
            # auto.create.topics.enable); the consumer's and admin's requests never do.
            view = await p._cluster.refresh(topics, auto_create=True)
            self.error = None
        except AUTHENTICATION_ERRORS as e:
            self.error = str(e)
            view = None
            if not p._stopped:
                p._authentication_failed(AuthenticationFailed(e))
        except Exception as e:  # noqa: BLE001 - any failure: keep the old view, retry later
            p.log.info("metadata refresh failed: {error}", error=repr(e))
            self.error = str(e) or repr(e)
            view = None
        finally:
            self._refreshing = False
            self._last = p._clock.seconds()
        if p._stopped:
            return
        if view is not None:
            p._apply(view, topics)
            if self._age_call is not None and self._age_call.active():
                self._age_call.cancel()
            self._age_call = p._clock.callLater(p.config.metadata_max_age_ms / 1000,
                                                self.request_refresh)
        if self._again or p._meta_waiters or p._topic_waiters or view is None:
            self._again = False
            if any(p._meta_waiters.values()) or any(p._topic_waiters.values()) or (
                    view is None and p._acc.incomplete):
                self.request_refresh()
        p._schedule(0)
