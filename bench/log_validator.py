"""The log validator's cost per record (broker_core/log/validator.py), in one process, no broker.

Batches of ``--records`` (default 5,000) records, validated ``--rounds`` (default 20) times each;
prints the best round per batch kind, in ns per record, next to the cost of parsing the same
batches' headers and CRCs (``iter_batches``), which the leader paid before the validator existed:

- ``uniform``: 100-byte values, null keys, no headers, timestamps within 50 ms (what kcat,
  librdkafka and Sluice's producer send for fixed-size messages): runs of same-shaped records;
- ``uniform, 2-byte ts``: the same spread over 5 s (timestamp deltas of two bytes);
- ``varied``: keys, values of 0-300 bytes, a header on one record in ten: field by field;
- each codec on the uniform records (decompression included, bound 1 MiB as
  ``max.message.bytes``' default, so batches stay under it).

With ``--small`` it prints instead the CPU time per batch, in µs, of validating small uniform
batches (1 to 16 records of 100 bytes, as a ``linger.ms=0`` producer sends them), and of the
leader's whole check of a one-record batch (``leader_batches``: offsets stamped, validated,
the topic's default settings applied), the best of ``--rounds`` passes of 100,000 batches.

Usage: python bench/log_validator.py [--records 5000] [--rounds 20] [--small]
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core.log.append_checks import leader_batches  # noqa: E402
from broker_core.log.config import LogConfig  # noqa: E402
from broker_core.log.producer_state import ProducerStateManager  # noqa: E402
from broker_core.log.validator import validate_records  # noqa: E402
from broker_core.wire.records import Compression, Record, build_batch, iter_batches  # noqa: E402

BOUND = 1048588  # max.message.bytes' default


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.small:
        small_batches(args.rounds)
        return
    n = args.records
    rnd = random.Random(1)
    base = 1_700_000_000_000
    kinds = {
        "uniform": [Record(None, b"x" * 100, [], base + i * 50 // n) for i in range(n)],
        "uniform, 2-byte ts": [Record(None, b"x" * 100, [], base + i * 5000 // n)
                               for i in range(n)],
        "varied": [Record(None if rnd.random() < 0.5 else b"key-%d" % i,
                          bytes(rnd.randrange(300)),
                          [("trace", b"abc")] if rnd.random() < 0.1 else [],
                          base + rnd.randrange(100)) for i in range(n)],
    }
    batches = {name: build_batch(recs) for name, recs in kinds.items()}
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        batches[f"uniform, {codec.name.lower()}"] = build_batch(kinds["uniform"],
                                                                compression=codec)
    print(f"{n:,} records a batch, best of {args.rounds} rounds; ns per record")
    print(f"{'batch':<22} {'validate':>10} {'headers+CRC':>12}")
    for name, data in batches.items():
        infos = list(iter_batches(data))
        v = best(lambda d=data, i=infos: validate_records(d, i, max_decompressed_bytes=BOUND),
                 args.rounds)
        h = best(lambda d=data: list(iter_batches(d)), args.rounds)
        print(f"{name:<22} {v / n * 1e9:>10,.0f} {h / n * 1e9:>12,.0f}")


def small_batches(rounds: int, repeat: int = 100_000) -> None:
    print(f"small uniform batches of 100-byte records, CPU µs a batch, best of {rounds}")
    for n in (1, 2, 5, 8, 16):
        data = build_batch([Record(None, b"x" * 100, [], 1_700_000_000_000)] * n)
        infos = list(iter_batches(data))
        times = []
        for _ in range(rounds):
            t = time.process_time()
            for _ in range(repeat):
                validate_records(data, infos, max_decompressed_bytes=BOUND)
            times.append(time.process_time() - t)
        print(f"{n:>3} record(s): {min(times) / repeat * 1e6:.2f}")
    data = build_batch([Record(None, b"x" * 100, [], 1_700_000_000_000)])
    config, producers = LogConfig(), ProducerStateManager()
    times = []
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(repeat):
            leader_batches(data, 5, 1, config, lambda: 1_700_000_000_000, producers)
        times.append(time.process_time() - t)
    print(f"leader_batches, 1 record: {min(times) / repeat * 1e6:.2f}")


if __name__ == "__main__":
    main()
