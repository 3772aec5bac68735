"""Producer ids in blocks: the sans-IO half of how brokers hand out idempotent producers' ids.

Every broker takes producer ids from a block it claimed in the metadata store's
``/latest_producer_id_block`` (:data:`broker_core.metadata_paths.LATEST_PRODUCER_ID_BLOCK`), Kafka's
znode and value. A claim reads the node, computes the block after the one it holds
(:func:`next_block`) and writes it conditionally on the version read; a lost race (BadVersion,
NodeExists) reads again. ``broker_core.server.producer_ids`` drives that loop on the store.

Invariants:

- blocks are claimed in order and never overlap: each is ``[previous end + 1, + size - 1]``,
  and only the writer of a version's successor owns it; so no id is handed out twice, by two
  brokers racing nor by a broker restarted (it claims a new block: the unused rest of its
  old one is skipped, never reused);
- ids are in ``[0, MAX_PRODUCER_ID]``; a store value outside it, or not Kafka's JSON, is refused
  (:class:`ValueError`), never "repaired": a broker hands out no id rather than a duplicate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: Kafka's block size (``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``).
BLOCK_SIZE = 1000
#: The largest producer id (int64), less a block so that ``end + 1`` never overflows.
MAX_PRODUCER_ID = (1 << 63) - 1 - BLOCK_SIZE


class ProducerIdsExhausted(Exception):
    """Every producer id has been handed out (after 9.2e18 of them)."""


@dataclass(frozen=True)
class ProducerIdBlock:
    """The ids ``start .. end`` (inclusive), claimed by broker ``broker``."""

    broker: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start <= self.end <= MAX_PRODUCER_ID) or self.broker < 0:
            raise ValueError(f"producer id block {self.start}..{self.end} of broker "
                             f"{self.broker} is out of bounds")

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    def to_bytes(self) -> bytes:
        # Kafka writes the bounds as strings (JSON numbers lose precision in some readers).
        return json.dumps({"version": 1, "broker": self.broker,
                           "block_start": str(self.start), "block_end": str(self.end)},
                          separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ProducerIdBlock:
        """Parse Kafka's value; ValueError names what is wrong (bounds included)."""
        try:
            v = json.loads(data.decode("utf-8"))
            broker, start, end = v["broker"], v["block_start"], v["block_end"]
            if isinstance(broker, bool) or not isinstance(broker, int):
                raise TypeError(f"broker {broker!r} is not an integer")
            # Kafka's strings, or numbers from a hand-made value.
            start, end = (int(x) if isinstance(x, (str, int)) and not isinstance(x, bool)
                          else _bad(x) for x in (start, end))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
                AttributeError) as e:
            raise ValueError(f"producer id block: bad value {data[:120]!r} ({e})") from None
        return cls(broker, start, end)


def _bad(x: object) -> int:
    raise TypeError(f"{x!r} is not an id")


def next_block(current: ProducerIdBlock | None, broker: int,
               size: int = BLOCK_SIZE) -> ProducerIdBlock:
    """The block after ``current`` (the first block, from id 0, when there is none yet), for
    ``broker``. Raises :class:`ProducerIdsExhausted` past :data:`MAX_PRODUCER_ID`."""
    if size < 1:
        raise ValueError(f"block size must be positive, got {size}")
    start = 0 if current is None else current.end + 1
    if start + size - 1 > MAX_PRODUCER_ID:
        raise ProducerIdsExhausted(f"no producer id block after {current}")
    return ProducerIdBlock(broker, start, start + size - 1)


class IdCursor:
    """Hands out the ids of the block a broker holds, in order, each once.

    ``take()`` gives the next id or None when the block is used up (or none is held yet): the
    caller then claims a block and :meth:`use` s it. Invariant: ids handed out are strictly
    increasing across blocks, since blocks are claimed in order."""

    def __init__(self) -> None:
        self._next = 0
        self._end = -1

    def use(self, block: ProducerIdBlock) -> None:
        if block.start <= self._end:
            raise ValueError(f"block {block.start}..{block.end} overlaps ids already held "
                             f"(up to {self._end})")
        self._next, self._end = block.start, block.end

    def take(self) -> int | None:
        if self._next > self._end:
            return None
        pid = self._next
        self._next += 1
        return pid

    @property
    def remaining(self) -> int:
        return max(0, self._end - self._next + 1)
