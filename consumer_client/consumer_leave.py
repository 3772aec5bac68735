"""A consumer's leave: UnregisterConsumer with the final offsets, one round trip, bounded.

:class:`Leave` is the consumer's collaborator for the ``DEPARTING`` state
(:mod:`consumer_client.membership`): it sends the leave on an ordinary connection to the
coordinator and feeds the outcome back to the consumer's state machine: ``LEFT`` on an answer,
``LEAVE_FAILED`` (the slow path: the offsets are handed over on the channel) on a refusal, a
failure, or no answer within :meth:`Leave.bound_s`.

Invariants: the leave is sent at most once per close and only in ``DEPARTING``; exactly one of
``LEFT`` / ``LEAVE_FAILED`` is fed, and neither once the state moved on; the offsets it reports
are everything the application got (the partitions are deactivated first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from broker_core.wire.apis import ApiKey
from consumer_client.consumer_errors import known_code
from consumer_client.membership import Input, State

if TYPE_CHECKING:
    from consumer_client.consumer import Consumer


class Leave:
    """Sends a closing consumer's leave and decides between the fast and the slow path (see
    the module docstring). ``consumer`` is the facade whose state it reads."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._timer: Any = None

    def cancel(self) -> None:
        """Stop the bound timer (the consumer finished)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def bound_s(self) -> float:
        """How long the leave may take before the slow path: one Ping interval (the
        coordinator pings every third of the session timeout), so the slow path still finds
        the member alive; never more than the request or shutdown timeout."""
        c = self._consumer
        cfg = c.config
        return min(cfg.session_timeout_ms / 3, cfg.request_timeout_ms,
                   cfg.shutdown_timeout_ms) / 1000.0

    def send(self) -> None:
        c = self._consumer
        if c.state is not State.DEPARTING:
            return  # the close ended (the channel went) while a revoke listener ran
        # No message leaves the streams any more (a blocking reader mid-chunk included): the
        # positions the leave reports are everything the application got.
        for ps in c.parts.values():
            ps.active = False
        if c._session_id == 0 or c.coordinator is None:
            # A coordinator that gave no session id (an older broker) cannot take a leave.
            c.last_error = "the coordinator cannot take a leave; handing over on the channel"
            self._timer = c.clock.callLater(0, self.failed, c.last_error)
            return
        self._timer = c.clock.callLater(
            self.bound_s(), self.failed,
            f"no answer to the leave within {self.bound_s():.3g} s")
        d = defer.Deferred.fromCoroutine(self._leave())
        d.addErrback(lambda f: c.log.failure("leave failed", f))

    async def _leave(self) -> None:
        c = self._consumer
        assert c.coordinator is not None
        _, host, port = c.coordinator
        cfg = c.config
        body = {"group_id": cfg.group_id, "consumer_id": cfg.consumer_id,
                "session_id": c._session_id,
                "offsets": c.positions() if cfg.auto_commit else []}
        try:
            resp = await c.cluster.request_address(
                (host, port), ApiKey.UNREGISTER_CONSUMER, body, version=0,
                timeout_s=self.bound_s())
        except Exception as e:  # noqa: BLE001 - any failure means: the slow path
            self.failed(f"leave to the coordinator at {host}:{port} failed: {e}")
            return
        if resp.error_code:
            self.failed(f"the coordinator refused the leave: "
                        f"{known_code(resp.error_code)!r}: {resp.error_message}")
            return
        if c.state is State.DEPARTING:
            c.log.info("{c} left group {g}", c=cfg.consumer_id, g=cfg.group_id)
            c._input(Input.LEFT)

    def failed(self, why: str) -> None:
        c = self._consumer
        if c.state is not State.DEPARTING:
            return  # decided already (answered, timed out, or the channel went)
        c.last_error = why
        c.log.info("{c}: {why}; handing the offsets over on the channel",
                   c=c.config.consumer_id, why=why)
        c._input(Input.LEAVE_FAILED)
