"""What keeps a consumer from its messages, since when, and when to say so (sans-IO).

The consumer (:mod:`consumer_client.consumer_problems`) feeds a :class:`HealthTracker` two kinds of
problem and the clock's time; the tracker decides, without I/O or timers of its own:

- which problems exist now: *unreachable* (the consumer is not registered with a coordinator:
  no bootstrap server answered, none named a coordinator, or the coordinator refused or dropped
  the registration) and *missing topics* (a subscribed topic the brokers say does not exist);
- when to warn: once per distinct reason (``key``), and again as a reminder when the same
  reason lasts ``reminder_s`` — never on every retry;
- when a problem becomes an *error* the application must hear about: once it has lasted
  ``bound_s`` (the consumer's ``default.api.timeout.ms``). A shorter blip (a broker restart, a
  coordinator moving) never reaches the application.

Invariants: ``unreachable_since`` is set exactly while the consumer is not registered (between
:meth:`lost` and :meth:`joined`); a topic is in ``missing`` from the first lookup that found it
absent until a lookup (or an assignment) finds it; times only come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Seconds between reminders of a problem that lasts (its reason unchanged).
REMINDER_S = 60.0

UNREACHABLE = "unreachable"
MISSING = "missing_topics"


@dataclass
class HealthTracker:
    """See the module docstring. ``bound_s`` > 0."""

    bound_s: float
    reminder_s: float = REMINDER_S
    unreachable_since: float | None = None
    reason: str | None = None  # the last reason the consumer could not register
    missing: dict[str, float] = field(default_factory=dict)  # topic -> first seen missing
    _said: dict[str, tuple[str, float]] = field(default_factory=dict)  # kind -> (key, at)
    cleared: bool = False  # the last topics_checked() found the last missing topics

    # -- inputs ---------------------------------------------------------------------------------

    def lost(self, now: float) -> None:
        """The consumer is not registered (starting, or it lost its coordinator)."""
        if self.unreachable_since is None:
            self.unreachable_since = now

    def joined(self) -> bool:
        """The consumer registered with a coordinator. True when the outage it ends had been
        warned about (worth saying that it is over)."""
        self.unreachable_since = None
        self.reason = None
        return self._said.pop(UNREACHABLE, None) is not None

    def failed_attempt(self, reason: str, key: str, now: float) -> bool:
        """An attempt to register failed for ``reason``; True when it is worth a warning
        (``key`` names the kind of failure, without what changes from one retry to the
        next)."""
        self.lost(now)
        self.reason = reason
        return self._should_say(UNREACHABLE, key, now)

    def topics_checked(self, checked: set[str], missing: set[str], now: float) -> bool:
        """A lookup of ``checked`` found ``missing`` absent (the rest exist). True when the
        set of missing topics changed to a new non-empty one (worth a warning)."""
        before = set(self.missing)
        self.cleared = bool(before)
        for t in checked:
            if t in missing:
                self.missing.setdefault(t, now)
            else:
                self.missing.pop(t, None)
        if not self.missing:
            self._said.pop(MISSING, None)
            return False
        self.cleared = False
        return set(self.missing) != before and self._should_say(
            MISSING, ",".join(sorted(self.missing)), now)

    def reminder_due(self, now: float) -> bool:
        """True (and counted as said) when the missing topics' last warning is ``reminder_s``
        old; unreachable reminders come with the retries (:meth:`failed_attempt`)."""
        if not self.missing:
            return False
        return self._should_say(MISSING, ",".join(sorted(self.missing)), now)

    def _should_say(self, kind: str, key: str, now: float) -> bool:
        said = self._said.get(kind)
        if said is not None and said[0] == key and now - said[1] < self.reminder_s:
            return False
        self._said[kind] = (key, now)
        return True

    # -- outputs --------------------------------------------------------------------------------

    def unreachable_overdue(self, now: float) -> bool:
        """Not registered for at least ``bound_s``."""
        return self.unreachable_since is not None and now - self.unreachable_since >= self.bound_s

    def overdue_topics(self, now: float) -> list[str]:
        """Subscribed topics missing for at least ``bound_s``, sorted."""
        return sorted(t for t, since in self.missing.items() if now - since >= self.bound_s)

    def next_check(self, now: float) -> float | None:
        """Seconds from ``now`` until a problem may change state (becomes overdue, or a
        reminder is due); None when there is nothing to watch."""
        times = []
        if self.unreachable_since is not None and not self.unreachable_overdue(now):
            times.append(self.unreachable_since + self.bound_s)
        for since in self.missing.values():
            times.append(since + self.bound_s if now - since < self.bound_s
                          else now + self.reminder_s)
        if not times:
            return None
        return max(0.0, min(times) - now)
