"""A broker's start-up steps that talk to the metadata quorum, retried through its leader
changes (:class:`QuorumStartRetries`).

A broker in quorum mode must not give up its start because the metadata quorum changed
leaders (or has none for a while): it waits for the next leader and goes on, as it does once
started. So every start-up step that needs a quorum round trip (opening the session, creating
the persistent paths and ``/cluster/id``, the registration and its wait for a previous
incarnation's) runs through :meth:`QuorumStartRetries.run`:

- **retried**: :class:`~broker_core.metadata.ConnectionLost` (no leader took the write within
  the client's own budget, or the write was sent and its answer lost, so it *may* have been
  applied) and :class:`~broker_core.metadata.SessionExpired` (the store opens a new session by
  itself). Because a lost answer means "maybe applied", every step run here must be
  idempotent when repeated after an applied attempt: a create treats ``NodeExists`` as the
  earlier attempt's success after re-reading the node (the registration checks that the node's
  owner is its own session), and an ``open_session`` whose answer was lost is simply opened
  again (``QuorumMetadataStore._open_session`` says what happens to a session that may
  have been opened: nobody heartbeats it, so the quorum leader expires it after the session
  timeout; it owns no node).
- **not retried**: those errors when the caller's ``retry_if`` says so (a broker whose quorum
  node never knew a leader: nothing changed leaders, the quorum was never reached, e.g. its
  cluster login is refused or ``quorum.voters`` is wrong), and anything else (a command the
  leader refuses, a :class:`~broker_core.broker.StartupError` such as a broker id held by
  another live broker): a retry cannot help, the start ends with its message.
- **backoff**: the wait before retry *n* of a step is
  :func:`broker_core.raft.admin.retry_backoff` (100 ms doubling to 1 s), on the injected clock.
- **bounded only by the stop**: :meth:`QuorumStartRetries.stop` ends a waiting retry at once
  (the step then fails with :class:`StartAbandoned`) and no new attempt starts; an attempt in
  flight ends within the quorum client's shutdown bound.

Every retry is logged with the step and the error, so an operator sees a start waiting for its
quorum rather than a silent one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from twisted.internet import defer, task
from twisted.logger import Logger

from broker_core.metadata import ConnectionLost, SessionExpired, StoreStopping
from broker_core.raft.admin import retry_backoff

T = TypeVar("T")

#: What a retried step may fail with and still succeed later: the quorum had no leader, or
#: lost the answer in a leader change; or the session went and the store is opening a new one.
RETRIABLE = (ConnectionLost, SessionExpired)


class StartAbandoned(Exception):
    """The start stopped retrying because the broker is stopping (not a failure to start)."""


class QuorumStartRetries:
    """Runs start-up steps until they succeed, fail for good, or :meth:`stop` is called.

    :param clock: the injected clock (``IReactorTime``) the backoffs wait on.
    :param describe: names the node for log lines (e.g. ``"broker 3"``).
    """

    log = Logger(namespace="sluice.broker.start")

    def __init__(self, clock: Any, describe: str) -> None:
        self.clock = clock
        self.describe = describe
        self.retries = 0  # every retry of every step, for tests and operators
        self.stopped = False
        self._sleeping: defer.Deferred | None = None

    def stop(self) -> None:
        """Stop retrying: a waiting retry ends at once with :class:`StartAbandoned`."""
        self.stopped = True
        sleeping, self._sleeping = self._sleeping, None
        if sleeping is not None and not sleeping.called:
            sleeping.cancel()

    async def run(self, what: str, step: Callable[[], Awaitable[T]], *,
                  retry_if: Callable[[], bool] = lambda: True) -> T:
        """``await step()`` until it returns, retrying on :data:`RETRIABLE` errors after a
        backoff while ``retry_if()``; ``what`` names the step in log lines and errors. (The
        broker's ``retry_if`` is "this node has known a quorum leader": a quorum it never
        reached is a configuration error, e.g. wrong ``quorum.voters`` or cluster secret, and
        the step's own bound ends the start as it did.)"""
        attempt = 0
        while True:
            if self.stopped:
                raise StartAbandoned(f"{self.describe} is stopping: {what} abandoned")
            try:
                return await step()
            except StoreStopping:
                raise  # the store's owner is stopping: no later attempt can get through
            except RETRIABLE as e:
                if self.stopped:
                    raise StartAbandoned(f"{self.describe} is stopping: {what} abandoned "
                                         f"({e})") from None
                if not retry_if():
                    raise
                attempt += 1
                self.retries += 1
                delay_s = retry_backoff(attempt) / 1000.0
                self.log.warn("{node}: {what} did not get through the metadata quorum ({e}); "
                              "retrying in {d:g}s (attempt {n}): the quorum may be changing "
                              "leaders", node=self.describe, what=what, e=e, d=delay_s,
                              n=attempt + 1)
            await self.sleep(delay_s, what)

    async def sleep(self, seconds: float, what: str) -> None:
        """Wait ``seconds`` on the clock, or until :meth:`stop` (then :class:`StartAbandoned`
        naming ``what``): a start's other waits end with the stop too."""
        if self.stopped:
            raise StartAbandoned(f"{self.describe} is stopping: {what} abandoned")
        # deferLater's Deferred cancels its timer when cancelled (stop()).
        d = task.deferLater(self.clock, seconds, lambda: None)
        self._sleeping = d
        try:
            await d
        except defer.CancelledError:
            raise StartAbandoned(f"{self.describe} is stopping: {what} abandoned") from None
        finally:
            if self._sleeping is d:
                self._sleeping = None
