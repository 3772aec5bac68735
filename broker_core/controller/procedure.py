"""The base of the controller's procedures: the objects that each carry out one kind of
controller work (ISR changes, preferred elections, controlled shutdown, topic deletion, broker
failover, partition changes, reassignment) for one :class:`~broker_core.controller.controller.Controller`.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger


class ControllerProcedure:
    """One kind of controller work, run on the controller's event thread.

    A procedure keeps the controller it works for (``controller``), that controller's
    ``context`` (``ctx``: the cluster state it caches) and its fenced ``writer``; it holds no
    cluster state of its own that the controller does not reset on resigning.

    The narrow interface a procedure may use on ``controller`` (each subclass names the part it
    uses): ``active`` and ``epoch`` (am I still the controller, and of which epoch), ``store``,
    ``reactor``, ``events`` (to enqueue follow-up events), ``log``, ``fencing``, ``channels`` /
    ``_open_channel``, the waiting callers (``_alter_waiters``, ``_answer``), the leadership
    rules (``_eligible``, ``_usable_live``, ``_fenced_brokers``, ``_offline_election``),
    ``_active_only`` (watches), ``_new_batch`` / ``_send`` / ``_send_leaders_first``, and the
    sibling procedures ``reassignment`` and ``topic_deletion``. The controller itself may be
    handed on to the controller's module-level event handlers (``log_dir_failure``).
    """

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.ctx = controller.context
        self.writer = controller.writer

    @property
    def log(self) -> Logger:
        """The controller's logger (read when used: tests replace it)."""
        return self.controller.log
