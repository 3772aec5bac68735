"""The blocking consumer: the Twisted :class:`~consumer_client.consumer.Consumer` driven from
ordinary threads, like Kafka's ZooKeeper consumer (``for message in stream``).

Example::

    with BlockingConsumer(bootstrap_servers="h:9092", group_id="g",
                          topics={"events": 1}) as consumer:
        for message in consumer:
            handle(message)

The core runs on the process's one reactor thread
(:class:`~consumer_client.reactor_thread.ReactorThread`, shared with the blocking producer). A
reader crosses to it once per *chunk* (one partition's data from one fetch, up to
``max.partition.fetch.bytes``), never per message, and decodes the chunk in its own thread, so
decoding does not hold up the fetchers' event loop beyond the GIL.

Invariants:

- a message counts as consumed (its offset + 1 is what Ping / StopFetcher / ``commit()``
  report) when the iterator hands it out; a chunk whose assignment ended (StopFetcher) is
  abandoned at once, mid-way if need be;
- the undelivered rest of a chunk stays with its reader (a ``for`` loop that ``break`` s and
  a later ``poll()`` continue where it stopped): nothing is skipped;
- one reader per stream and thread: each :class:`BlockingStream` is for one thread at a time
  (the design's model: one consumer thread per stream); different streams may be read from
  different threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from twisted.internet import defer

from consumer_client.consumer import Consumer, Health, MemberInfo
from consumer_client.consumer_config import ConsumerConfig
from consumer_client.consumer_records import Message
from consumer_client.consumer_streams import Chunk, MessageSource, PartitionState, StreamClosed
from consumer_client.membership import State
from consumer_client.reactor_thread import ReactorThread

__all__ = ["BlockingConsumer", "BlockingStream"]

_EMPTY: list[Message] = []


class BlockingStream:
    """A blocking reader of one source of chunks (one stream, or all of a consumer's)."""

    def __init__(self, rt: ReactorThread, source: MessageSource, clock: Any) -> None:
        self._rt = rt
        self._source = source
        self._clock = clock
        self._msgs: list[Message] = _EMPTY
        self._i = 0
        self._part: PartitionState | None = None

    def _get_chunk(self, timeout: float | None) -> defer.Deferred:
        d = self._source.get_chunk()
        if timeout is not None and not d.called:
            d.addTimeout(timeout, self._clock)

            def none(f: Any) -> None:
                f.trap(defer.TimeoutError, defer.CancelledError)
                return None

            d.addErrback(none)
        return d

    def _refill(self, timeout: float | None) -> bool:
        """Take the next chunk (waiting up to ``timeout``; forever when None). False on
        timeout; raises :class:`StreamClosed` (or the consumer's fatal error) at the end."""
        chunk: Chunk | None = self._rt.call(self._get_chunk, timeout)
        if chunk is None:
            return False
        self._part = chunk.part
        self._msgs = chunk.messages() if chunk.part.active else _EMPTY
        self._i = 0
        return True

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: until one comes);
        None on timeout. Raises :class:`StreamClosed` once the consumer is closed."""
        while True:
            part = self._part
            if self._i < len(self._msgs) and part is not None and part.active:
                m = self._msgs[self._i]
                self._i += 1
                part.consumed = m.offset + 1
                return m
            if not self._refill(timeout) and timeout is not None:
                return None

    def consume(self, num_messages: int = 10_000, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` messages of one chunk, as a list: the rest of the chunk being
        read, or else the next chunk, waiting for it up to ``timeout`` seconds (None: until one
        comes); ``[]`` on timeout. Raises as :meth:`poll`. The partition's position moves past
        the messages when they are returned; the rest of a chunk stays for the next call.
        Cheaper per message than :meth:`poll` or the iterator (one position update per call),
        like confluent-kafka's ``consume(num_messages)``."""
        if num_messages < 1:
            raise ValueError(f"num_messages must be at least 1, got {num_messages}")
        while True:
            msgs, i, part = self._msgs, self._i, self._part
            if part is not None and i < len(msgs):
                if part.active:
                    j = min(len(msgs), i + num_messages)
                    self._i = j
                    part.consumed = msgs[j - 1].offset + 1
                    if i == 0 and j == len(msgs):
                        # The whole chunk: hand the list over and forget it here, so that
                        # what the caller does with it cannot reach this reader's state.
                        self._msgs, self._i = _EMPTY, 0
                        return msgs
                    return msgs[i:j]
                self._msgs, self._i = _EMPTY, 0  # the assignment ended: the rest is dropped
            # The rest of one chunk at most, so one hop to the reactor thread per chunk.
            if not self._refill(timeout) and timeout is not None:
                return []

    def __iter__(self) -> Iterator[Message]:
        """Every message until the consumer closes (then the loop ends; a fatal error such
        as a rejected registration is raised)."""
        while True:
            msgs, i, part = self._msgs, self._i, self._part
            if part is not None and i < len(msgs):
                for m in msgs[i:] if i else msgs:
                    if not part.active:
                        break
                    i += 1
                    self._i = i
                    part.consumed = m.offset + 1
                    yield m
            try:
                self._refill(None)
            except StreamClosed:
                return


class BlockingConsumer:
    """A consumer for programs without a reactor; see the module docstring. Takes a
    :class:`ConsumerConfig`, a mapping of Kafka keys, or keyword arguments."""

    def __init__(self, config: ConsumerConfig | Mapping[str, Any] | None = None, *,
                 listener: Any = None, **kwargs: Any) -> None:
        if config is None:
            cfg = ConsumerConfig.create(**kwargs)
        elif isinstance(config, ConsumerConfig):
            cfg = config
        else:
            cfg = ConsumerConfig.from_mapping(config)
        self.config = cfg
        self._rt = ReactorThread.get()
        self._consumer: Consumer = self._rt.call(self._make, cfg, listener)
        self._all = BlockingStream(self._rt, self._consumer.messages, self._consumer.clock)
        self._streams: dict[Any, BlockingStream] = {}
        #: Set when Ctrl-C (KeyboardInterrupt) ended the iteration or the ``with`` block.
        self.interrupted = False

    def _make(self, cfg: ConsumerConfig, listener: Any) -> Consumer:
        c = Consumer(cfg, reactor=self._rt.reactor, listener=listener)
        c.start()
        return c

    @property
    def consumer(self) -> Consumer:
        """The Twisted core (use it only on the reactor thread)."""
        return self._consumer

    def __iter__(self) -> Iterator[Message]:
        """Every message until the consumer closes. Ctrl-C while waiting for messages ends
        the loop cleanly: the consumer leaves the group (handing over its positions) and
        :attr:`interrupted` is set; the program goes on after the loop."""
        try:
            yield from self._all
        except KeyboardInterrupt:
            self.interrupted = True
            self.close()

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message from any stream, or None after ``timeout`` seconds.

        Raises :class:`~consumer_client.consumer.ConsumerUnavailable` once the consumer has not
        been able to join its group for ``default.api.timeout.ms`` (no broker reachable, no
        coordinator), or :class:`~consumer_client.consumer.TopicNotFound` once a subscribed
        topic has not existed for that long, while no message is ready; the consumer keeps
        retrying, and a later ``poll`` returns messages again once the problem is gone.
        Iteration raises the same."""
        return self._all.poll(timeout)

    def consume(self, num_messages: int = 10_000, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` messages from any stream, as a list, or ``[]`` after
        ``timeout`` seconds with none (see :meth:`BlockingStream.consume`); raises as
        :meth:`poll`. The fastest way to read: no per-message bookkeeping."""
        return self._all.consume(num_messages, timeout)

    def streams(self, topic: str | None = None) -> list[BlockingStream]:
        """One blocking iterator per stream of ``topic`` (None: the wildcard streams), as
        many as the subscription's stream count; read each from its own thread."""
        out = []
        for s in self._consumer.streams_of(topic):
            if s.key not in self._streams:
                self._streams[s.key] = BlockingStream(self._rt, s, self._consumer.clock)
            out.append(self._streams[s.key])
        return out

    def commit(self) -> dict[tuple[str, int], int]:
        """Commit the positions now; returns what was committed (see ``Consumer.commit``)."""
        return self._rt.call(self._consumer.commit)

    @property
    def member(self) -> MemberInfo:
        return self._rt.call(lambda: self._consumer.member)

    @property
    def health(self) -> Health:
        """What keeps the consumer from its messages now (see ``Consumer.health``)."""
        return self._rt.call(lambda: self._consumer.health)

    def wait_for(self, *states: State, timeout: float = 30.0) -> State:
        """Block until the member is in one of ``states``; raises ``TimeoutError``."""
        def wait() -> defer.Deferred:
            return self._consumer.wait_for(*states).addTimeout(timeout, self._consumer.clock)

        try:
            return self._rt.call(wait)
        except defer.TimeoutError:
            raise TimeoutError(f"the consumer did not reach {[s.value for s in states]} in "
                               f"{timeout}s") from None

    def close(self) -> None:
        """Leave the group (with auto-commit: after handing over the final offsets; one
        round trip to the coordinator, and only when it does not answer up to a Ping interval
        or two more, bounded by ``shutdown.timeout.ms``). Idempotent."""
        self._rt.call(self._consumer.close)

    def __enter__(self) -> BlockingConsumer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Leave the group. A Ctrl-C (KeyboardInterrupt) inside the block ends it cleanly:
        the consumer leaves, :attr:`interrupted` is set and the exception goes no further
        (the program continues after the block, with no traceback)."""
        self.close()
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.interrupted = True
            return True
        return False
