"""A hierarchical timing wheel (Kafka's ``TimingWheel.scala``) driven by an injected clock.

Design
======

A purgatory may hold tens of thousands of delayed operations, almost all of which complete before
their timeout. Giving each one its own ``callLater`` costs a heap insert and a heap removal per
operation (O(log n) each) plus a reactor timer per operation. A timing wheel makes adding and
cancelling a timer O(1): it is a circular array of ``wheel_size`` *buckets*, each holding the
tasks whose deadlines fall into one tick of ``tick`` seconds. A wheel covers
``interval = tick * wheel_size``; a task further away than that goes to an *overflow wheel* whose
tick is the whole interval of the wheel below it, and so on up (created on demand). With the
defaults (5 ms x 64)::

    level 0: tick 5 ms,     covers 320 ms
    level 1: tick 320 ms,   covers 20.48 s
    level 2: tick 20.48 s,  covers ~21.8 min
    level 3: tick ~21.8 min, covers ~23.3 h       (and so on)

Each level has a *current time*, a multiple of its tick. A task with deadline ``d`` (rounded up
to a whole number of base ticks, ``e``) goes into the lowest level where
``e < current + interval``, in the bucket of *virtual id* ``e // tick``; the bucket's expiration
is ``virtual_id * tick``. Because a level only accepts ``wheel_size`` consecutive virtual ids
ahead of its current time, two live buckets never share a slot.

Worked example (defaults, clock at 0): a 10 ms deadline is tick 2, in level 0's bucket 2,
which expires at 10 ms. A 3 s deadline (tick 600) is past level 0's 64 ticks, so it goes to
level 1, virtual id 600 // 64 = 9, a bucket that expires at tick 576 (2.88 s). When that bucket
expires, the wheel's clock moves to 2.88 s and the task is re-inserted: now 24 ticks ahead, it
fits level 0 and fires at exactly 3 s. A 10 min deadline (tick 120000) goes to level 2 (virtual
id 29, expiring at tick 118784 = 593.92 s), then falls to level 1, into a bucket that expires at
600 s, when it runs. A task moves down at most once per level, so its cost stays O(levels).

Instead of Kafka's ``DelayQueue`` of buckets polled by a reaper thread, the wheel keeps a small
heap of *buckets* (at most ``levels * wheel_size`` entries, independent of the number of tasks)
and ONE ``clock.callLater`` armed for the earliest non-empty bucket, re-armed as buckets empty
or earlier ones appear. No task ever gets a ``DelayedCall`` of its own.

Timing guarantees: a task never runs before its deadline, and runs at most one tick after it
once the clock reaches it (level-0 buckets expire at the *end* of their tick; Kafka's expire at
the start and may run a task up to one tick early). Tasks that fall due in the same clock
advance run in deadline order, ties in the order they were added.

Why a 5 ms tick rather than Kafka's 1 ms: every bucket expiry costs a reactor wake-up and some
tens of microseconds of Python; with many operations whose deadlines spread over time, a 1 ms
tick can wake the reactor up to 1000 times a second just to expire timers. 5 ms caps that at
200 wake-ups a second, batches expiries five times more, and the lateness it adds (< 5 ms) is
1% of Kafka's default fetch wait (``fetch.max.wait.ms`` / ``replica.fetch.wait.max.ms``, 500 ms)
and below the reactor's own timer jitter under load. Times are handled in whole microseconds
internally so that float sums from the clock do not move a task into the wrong tick.

Threading: none. The wheel belongs to the reactor thread; tasks run on it, and may add or cancel
tasks (including themselves) while they run.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger(namespace="sluice.timing_wheel")

_US = 1_000_000
DEFAULT_TICK_S = 0.005
DEFAULT_WHEEL_SIZE = 64


class TimerTask:
    """Something a :class:`TimingWheel` runs once at its deadline, unless cancelled first.

    Invariant: a task is in at most one bucket of one wheel at a time (``scheduled`` says
    whether it is); ``cancel()`` takes it out in O(1) and guarantees ``run()`` will not be
    called for that scheduling, even if the task was already due in the current clock advance.
    Subclasses implement :meth:`run`.
    """

    # Class-level defaults so a subclass that forgets ``super().__init__()`` still works.
    _bucket: _Bucket | None = None
    _due: bool = False
    _deadline_us: int = 0
    _seq: int = 0

    def run(self) -> None:
        """Called on the reactor thread when the deadline has passed."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Remove the task from its wheel; a no-op if it is not scheduled."""
        self._due = False
        bucket = self._bucket
        if bucket is not None:
            bucket.remove(self)

    @property
    def scheduled(self) -> bool:
        """True while the task waits in a wheel (or is due and about to run)."""
        return self._bucket is not None or self._due


class CallbackTask(TimerTask):
    """A :class:`TimerTask` that calls ``fn(*args)``."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn = fn
        self.args = args

    def run(self) -> None:
        self.fn(*self.args)


class _Bucket:
    """The tasks of one slot of one level; ``expiration`` (in base ticks) is set while the bucket
    holds tasks of some virtual id and is in the wheel's bucket heap, and ``None`` otherwise."""

    __slots__ = ("tasks", "expiration", "wheel")

    def __init__(self, wheel: TimingWheel) -> None:
        # Keyed by id(): O(1) removal, insertion order kept, and no reliance on tasks'
        # own __hash__/__eq__.
        self.tasks: dict[int, TimerTask] = {}
        self.expiration: int | None = None
        self.wheel = wheel

    def add(self, task: TimerTask) -> None:
        self.tasks[id(task)] = task
        task._bucket = self
        self.wheel._count += 1

    def remove(self, task: TimerTask) -> None:
        if self.tasks.pop(id(task), None) is not None:
            task._bucket = None
            self.wheel._removed_one()

    def flush(self) -> list[TimerTask]:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        self.expiration = None
        for t in tasks:
            t._bucket = None
        self.wheel._count -= len(tasks)
        return tasks


class _Level:
    """One wheel of the hierarchy; times are in base ticks."""

    __slots__ = ("tick", "interval", "current", "buckets")

    def __init__(self, tick: int, wheel_size: int, start: int, wheel: TimingWheel) -> None:
        self.tick = tick
        self.interval = tick * wheel_size
        self.current = start - start % tick
        self.buckets = [_Bucket(wheel) for _ in range(wheel_size)]


class TimingWheel:
    """Hierarchical timing wheel on an injected :class:`IReactorTime` (see the module docstring).

    Invariants: every bucket with an ``expiration`` is in the bucket heap exactly once; at most
    one ``DelayedCall`` is armed, for the earliest non-empty bucket, and none when the wheel is
    empty; no level's current time passes the expiration of a bucket that has not been flushed.
    """

    def __init__(self, clock: IReactorTime, tick_s: float = DEFAULT_TICK_S,
                 wheel_size: int = DEFAULT_WHEEL_SIZE) -> None:
        tick_us = round(tick_s * _US)
        if tick_us < 1:
            raise ValueError(f"tick_s must be at least 1 microsecond, got {tick_s!r}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be at least 2, got {wheel_size!r}")
        self.clock = clock
        self.tick_s = tick_us / _US
        self.wheel_size = wheel_size
        self._tick_us = tick_us
        self._levels = [_Level(1, wheel_size, self._now_us() // tick_us, self)]
        self._heap: list[tuple[int, int, _Bucket]] = []
        self._heap_seq = itertools.count()
        self._task_seq = itertools.count()
        self._count = 0
        self._call: Any = None
        self._armed_tick: int | None = None
        self._advancing = False
        self._running: list[TimerTask] = []  # the due tasks of the advance() in progress

    # -- public API ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Tasks waiting in the wheel."""
        return self._count

    @property
    def levels(self) -> int:
        """How many wheels the hierarchy has grown to."""
        return len(self._levels)

    @property
    def next_expiry(self) -> float | None:
        """Clock time the wheel is armed for (the earliest non-empty bucket), or None."""
        if self._armed_tick is None:
            return None
        return self._armed_tick * self._tick_us / _US

    def add(self, task: TimerTask, deadline: float) -> bool:
        """Schedule ``task`` to run once ``clock.seconds() >= deadline``.

        Returns False, without scheduling, when the deadline has already passed: the caller runs
        the task at once (Kafka's contract). Raises ValueError if the task is already scheduled.
        """
        if task.scheduled:
            raise ValueError(f"timer task {task!r} is already scheduled")
        deadline_us = round(deadline * _US)
        now_us = self._now_us()
        if deadline_us <= now_us:
            return False
        task._deadline_us = deadline_us
        task._seq = next(self._task_seq)
        self._sync(now_us)
        self._insert(task)
        self._arm(now_us)
        return True

    def advance(self) -> int:
        """Run every task whose deadline has passed; returns how many ran.

        The armed ``callLater`` calls this; tests and owners may call it too (Kafka's
        ``advanceClock``). A call from inside a running task is a no-op: the outer call
        carries on with whatever became due.
        """
        if self._advancing:
            return 0
        self._advancing = True
        ran = 0
        try:
            self._running = self._collect_due(self._now_us())
            for task in self._running:
                if not task._due:
                    continue  # cancelled by a task that ran before it in this advance
                task._due = False
                ran += 1
                try:
                    task.run()
                except Exception:
                    log.failure("timer task {task!r} raised", task=task)
        finally:
            self._running = []
            self._advancing = False
            self._arm(self._now_us())
        return ran

    def stop(self) -> list[TimerTask]:
        """Disarm the clock and remove every task without running it; returns the removed tasks
        (earliest deadline first) so the owner can account for them. Called from inside a task,
        it also keeps the tasks still due in that advance from running."""
        self._disarm()
        removed: list[TimerTask] = []
        for task in self._running:
            if task._due:
                task._due = False
                removed.append(task)
        for level in self._levels:
            for bucket in level.buckets:
                removed.extend(bucket.flush())
        self._heap.clear()
        removed.sort(key=lambda t: (t._deadline_us, t._seq))
        return removed

    # -- internals -------------------------------------------------------------------------------

    def _now_us(self) -> int:
        return round(self.clock.seconds() * _US)

    def _sync(self, now_us: int) -> None:
        """Move the levels' clocks up to now, but never past an unflushed bucket (that would let
        a new virtual id claim its slot)."""
        target = now_us // self._tick_us
        if self._heap and self._heap[0][0] < target:
            target = self._heap[0][0]
        self._advance_levels(target)

    def _advance_levels(self, tick: int) -> None:
        for level in self._levels:
            if tick >= level.current + level.tick:
                level.current = tick - tick % level.tick

    def _insert(self, task: TimerTask) -> None:
        expiry = -(-task._deadline_us // self._tick_us)  # ceil: never early
        i = 0
        while True:
            level = self._levels[i]
            if expiry < level.current + level.interval:
                vid = expiry // level.tick
                bucket = level.buckets[vid % self.wheel_size]
                bucket.add(task)
                if bucket.expiration is None:
                    bucket.expiration = vid * level.tick
                    heapq.heappush(self._heap, (bucket.expiration, next(self._heap_seq), bucket))
                return
            i += 1
            if i == len(self._levels):
                self._levels.append(
                    _Level(level.interval, self.wheel_size, level.current, self))

    def _collect_due(self, now_us: int) -> list[TimerTask]:
        """Flush every expired bucket, re-inserting tasks not yet due into finer levels; returns
        the due tasks in deadline order. Runs no task code, so nothing can re-enter here."""
        now_tick = now_us // self._tick_us
        due: list[TimerTask] = []
        heap = self._heap
        while heap and heap[0][0] <= now_tick:
            expiration, _, bucket = heapq.heappop(heap)
            if bucket.expiration != expiration:
                continue  # defensive: a stale heap entry
            self._advance_levels(expiration)
            for task in bucket.flush():
                if task._deadline_us <= now_us:
                    task._due = True
                    due.append(task)
                else:
                    self._insert(task)
        self._advance_levels(now_tick)
        due.sort(key=lambda t: (t._deadline_us, t._seq))
        return due

    def _removed_one(self) -> None:
        self._count -= 1
        if self._count == 0 and not self._advancing:
            # Nothing left to expire: let an idle broker sleep. Emptied buckets are dropped
            # from the heap lazily, by _arm.
            self._disarm()

    def _arm(self, now_us: int) -> None:
        if self._advancing:
            return  # advance() re-arms once it is done
        heap = self._heap
        # Emptied buckets (all their tasks cancelled) at the head would wake the reactor for
        # nothing; drop them so the call is armed for the earliest bucket with work.
        while heap and not heap[0][2].tasks:
            _, _, bucket = heapq.heappop(heap)
            bucket.expiration = None
        if not heap:
            self._disarm()
            return
        tick = heap[0][0]
        call = self._call
        if call is not None and call.active() and self._armed_tick == tick:
            return
        delay = max(0, tick * self._tick_us - now_us) / _US
        if call is not None and call.active():
            call.reset(delay)
        else:
            self._call = self.clock.callLater(delay, self._fire)
        self._armed_tick = tick

    def _disarm(self) -> None:
        call = self._call
        if call is not None and call.active():
            call.cancel()
        self._call = None
        self._armed_tick = None

    def _fire(self) -> None:
        self._call = None
        self._armed_tick = None
        self.advance()
