"""Records of every shape the record codec must carry (no key, no value, headers, multi-byte
varints) for the consumer and Spark decoders' tests.
"""

from __future__ import annotations

from broker_core.wire.records import (
    Record,
)

RECORDS = [Record(None, b"v%d" % i * 20, [], 1000 + i) for i in range(50)] + [
    Record(b"key", None, [("h1", b"x"), ("h2", None)], 2000),
    Record(b"", b"", [], 2001),
    Record(b"k" * 300, b"v" * 70000, [], 2002),  # multi-byte varints everywhere
]


def varied(n: int, seed: int) -> list[Record]:
    """Records that take every path of the record loop: null and present keys (short and
    long), null and empty values, values of every varint width, headers, timestamps that go
    back and forth, more than 8,192 records (three-byte offset deltas)."""
    import random

    rng = random.Random(seed)
    out = []
    ts = 1_700_000_000_000
    for _ in range(n):
        roll = rng.random()
        key = None if roll < 0.6 else b"k" * rng.choice([0, 5, 63, 64, 200, 9000])
        value = None if roll > 0.97 else b"v" * rng.choice([0, 1, 63, 64, 100, 8191, 8192, 20000])
        headers = [] if rng.random() < 0.9 else [("h", b"x" * rng.randint(0, 70)), ("n", None)]
        ts += rng.choice([0, 0, 0, 1, 2, 70, -3, 9000])
        out.append(Record(key, value, headers, ts))
    return out


