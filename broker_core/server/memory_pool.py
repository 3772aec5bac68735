"""The memory budget for request bytes, Kafka's ``queued.max.request.bytes``, sans-IO.

A connection that has read the 4-byte size of a frame of N bytes asks the pool for N before it
buffers any byte of the body; when the pool cannot give N, the connection stops reading from its
socket until memory is released (Kafka mutes the channel the same way). The bytes are given back
once the request's handler is done with it (at dispatch, or when a handler that answers later,
an acks=all Produce, has answered), or when the connection closes. A peer that sends a huge size
and then trickles the body therefore holds memory the pool accounts for, and every such peer
together holds at most the pool.

Reserving at the size prefix (Kafka's model) lets a peer hold memory it never sends. What
bounds that abuse: the read deadline of a frame whose size has arrived (the protocol closes a
connection that does not complete it in time, and its reservation goes back), and the pool's
per-host cap: one peer host holds at most ``host_capacity`` bytes, so one host cannot take
the whole pool however many connections it opens. A connection over its host's cap waits as
one over the pool's capacity does.

Invariants (:class:`MemoryPool`):

- ``0 <= in_use <= capacity`` at every moment (a bounded pool), and for every host
  ``0 < per_host[host] <= host_capacity`` (a host holding nothing has no entry); the
  configuration guarantees that every frame fits in an empty pool and under an empty host's cap
  (``queued.max.request.bytes`` and its per-IP share are at least ``socket.request.max.bytes``),
  so every waiter is eventually served once the holders release;
- a waiter is granted at most once; on each release every waiter that now fits is granted,
  oldest first (first fit in arrival order). A small request never waits behind a large one
  that does not fit yet, so ordinary clients keep working while large frames wait; the price,
  accepted, is that a large waiter waits for as long as smaller requests keep the pool too full
  for it;
- a cancelled waiter (its connection closed) is never granted;
- grant callbacks run after the pool's state is consistent, so a callback may reserve or release
  again.

:class:`ConnectionBudget` is one connection's side of it: what it holds and whether it waits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

#: The pool a SASL listener's connections reserve from before they have logged in, and its
#: per-host share. A frame is at most 512 KiB then (a real login sends a few hundred bytes);
#: 16 MiB serves 32 such frames at once, 4 per host, so connections that never log in hold
#: at most this much between them, never the listeners' pool, and one host cannot stall the
#: others' logins.
UNAUTHENTICATED_POOL_BYTES = 16 * 1024 * 1024
UNAUTHENTICATED_HOST_BYTES = 2 * 1024 * 1024


class MemoryPool:
    """A broker-wide count of reserved request bytes; see the module docstring.

    ``capacity`` None: unbounded (Kafka's ``-1``): every reservation is granted at once, and the
    bytes are still counted (the metric shows what requests hold). ``host_capacity`` None: no
    per-host cap; else at most that many bytes per host (and never more than ``capacity``).
    """

    def __init__(self, capacity: int | None, host_capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("a bounded pool needs a capacity of at least one byte")
        if host_capacity is not None and host_capacity < 1:
            raise ValueError("a per-host cap must be at least one byte")
        if host_capacity is not None and capacity is not None:
            host_capacity = min(host_capacity, capacity)
        self.capacity = capacity
        self.host_capacity = host_capacity
        self.in_use = 0
        #: Bytes held per peer host (hosts holding nothing have no entry).
        self.per_host: dict[str, int] = {}
        # Insertion-ordered: the order waiters asked in. callback -> (bytes wanted, host).
        self._waiters: dict[Callable[[], None], tuple[int, str | None]] = {}

    @property
    def waiting(self) -> int:
        """Connections waiting for memory (reading paused)."""
        return len(self._waiters)

    def _fits(self, size: int, host: str | None) -> bool:
        if self.capacity is not None and self.in_use + size > self.capacity:
            return False
        return (host is None or self.host_capacity is None
                or self.per_host.get(host, 0) + size <= self.host_capacity)

    def _take(self, size: int, host: str | None) -> None:
        self.in_use += size
        if host is not None and size:
            self.per_host[host] = self.per_host.get(host, 0) + size

    def try_reserve(self, size: int, on_granted: Callable[[], None],
                    host: str | None = None) -> bool:
        """Reserve ``size`` bytes for a connection from ``host`` (None: not capped per host):
        True when granted now; else ``on_granted`` is queued and called once the bytes are
        reserved for it (unless :meth:`cancel` comes first)."""
        if size < 0:
            raise ValueError("cannot reserve a negative size")
        if on_granted in self._waiters:
            raise RuntimeError("this waiter already waits for memory")
        if self.capacity is not None and size > self.capacity:
            raise ValueError(f"{size} bytes can never fit in a pool of {self.capacity}")
        if host is not None and self.host_capacity is not None and size > self.host_capacity:
            raise ValueError(f"{size} bytes can never fit under a per-host cap of "
                             f"{self.host_capacity}")
        if self._fits(size, host):
            self._take(size, host)
            return True
        self._waiters[on_granted] = (size, host)
        return False

    def release(self, size: int, host: str | None = None) -> None:
        """Give back ``size`` bytes reserved for ``host``, then grant every waiter that now
        fits."""
        if size < 0 or size > self.in_use:
            raise ValueError(f"cannot release {size} bytes with {self.in_use} in use")
        if host is not None and size:
            held = self.per_host.get(host, 0)
            if size > held:
                raise ValueError(f"cannot release {size} bytes of {host} holding {held}")
            if held == size:
                del self.per_host[host]
            else:
                self.per_host[host] = held - size
        self.in_use -= size
        granted = []
        for callback, (wanted, whose) in list(self._waiters.items()):
            if self._fits(wanted, whose):
                del self._waiters[callback]
                self._take(wanted, whose)
                granted.append(callback)
        for callback in granted:
            callback()

    def cancel(self, on_granted: Callable[[], None]) -> None:
        """Forget a waiter (its connection closed); nothing if it is not waiting."""
        self._waiters.pop(on_granted, None)


class ConnectionBudget:
    """One connection's reservations in a :class:`MemoryPool`.

    The frame decoder asks :meth:`admit` once per frame when the frame's size has arrived;
    the connection calls :meth:`done` with a frame's size once the frame is dispatched, and
    :meth:`close` when it closes. ``on_granted`` is called when a frame that had to wait has
    its memory (the connection then resumes reading). ``pool`` and ``host`` say where the next
    frame reserves (the connection moves from a small pre-authentication pool to the
    listeners' pool once it has logged in); each frame is given back where it was reserved.

    A frame's memory may outlive its dispatch: a handler that answers later (an acks=all
    Produce waiting for its replicas) still holds the request's bytes, so the connection takes
    the frame out with :meth:`dispatched` and gives it back with :meth:`release` once the
    answer is made (:meth:`done` is both at once).

    Invariants: ``held`` is the sum of the admitted frames not yet released; ``_frames`` holds
    the undispatched ones (pool, host, size) in the order they are dispatched, ``_kept`` the
    dispatched ones not yet released; at most one frame waits at a time (a connection reads
    its frames in order); after :meth:`close` nothing is held, nothing waits, and
    ``on_granted`` is never called.
    """

    def __init__(self, pool: MemoryPool, on_granted: Callable[[], None],
                 host: str | None = None) -> None:
        self.pool = pool
        self.host = host
        self._on_granted = on_granted
        self.held = 0
        self._frames: deque[tuple[MemoryPool, str | None, int]] = deque()
        self._kept: dict[int, tuple[MemoryPool, str | None, int]] = {}
        self._next_token = 0
        self._wanted: tuple[MemoryPool, str | None, int] | None = None
        self._closed = False

    @property
    def waiting(self) -> bool:
        """True while a frame waits for memory."""
        return self._wanted is not None

    def admit(self, size: int) -> bool:
        """Reserve ``size`` bytes for the next frame: True if granted now, else it waits."""
        if self._closed:
            return False
        if self._wanted is not None:
            raise RuntimeError("a frame already waits for memory on this connection")
        frame = (self.pool, self.host, size)
        if self.pool.try_reserve(size, self._granted, self.host):
            self._frames.append(frame)
            self.held += size
            return True
        self._wanted = frame
        return False

    def _granted(self) -> None:
        assert self._wanted is not None
        self._frames.append(self._wanted)
        self.held += self._wanted[2]
        self._wanted = None
        self._on_granted()

    def dispatched(self, size: int) -> int:
        """The oldest admitted frame (of ``size`` bytes) was dispatched; its memory stays
        reserved until :meth:`release` of the returned token."""
        if self._closed:
            return -1
        if not self._frames or self._frames[0][2] != size:
            raise RuntimeError(f"dispatched {size} bytes while holding {list(self._frames)}")
        token, self._next_token = self._next_token, self._next_token + 1
        self._kept[token] = self._frames.popleft()
        return token

    def release(self, token: int) -> None:
        """Give a dispatched frame's memory back where it was reserved (nothing after
        :meth:`close`, which gave it back already)."""
        frame = self._kept.pop(token, None)
        if frame is None:
            return
        pool, host, size = frame
        self.held -= size
        pool.release(size, host)

    def done(self, size: int) -> None:
        """The oldest admitted frame (of ``size`` bytes) was dispatched and is no longer
        needed: give its memory back."""
        self.release(self.dispatched(size))

    def close(self) -> None:
        """Release everything held and stop waiting (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._wanted is not None:
            self._wanted[0].cancel(self._granted)
        self._wanted = None
        frames = [*self._frames, *self._kept.values()]
        self._frames, self._kept = deque(), {}
        self.held = 0
        for pool, host, size in frames:
            pool.release(size, host)
