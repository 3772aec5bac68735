"""What the frame decoder costs per frame, for frames of several sizes fed in reads of several
sizes (CPU time of this process, best of ``--repeat`` passes).

A broker reads requests and, as a follower, fetch responses through
``broker_core.wire.framing.FrameDecoder``: small requests arrive whole in one read, a follower's
fetch answers of a megabyte or more arrive over many 64 KiB reads. Each case feeds a stream of
``frames`` frames of ``size`` bytes cut into reads of ``read`` bytes (so frame boundaries fall
inside reads) and prints the CPU time per frame.

Usage: python bench/frame_decoder.py [--repeat 5]
Prints figures; asserts only that every frame came out.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core.wire.framing import FrameDecoder  # noqa: E402

#: (frame size, read size, frames): small requests read whole, several in a read, then
#: follower fetch answers of 60 KB and 1 MB in 64 KiB reads and 1 MB in 4 KiB reads.
CASES = [(300, 304, 20_000), (2_000, 2_004, 5_000), (300, 65_536, 20_000),
         (60_000, 65_536, 500), (1_000_000, 65_536, 20), (1_000_000, 4_096, 10)]


def per_frame_us(size: int, read: int, frames: int, repeat: int) -> float:
    one = struct.pack(">i", size) + b"x" * size
    stream = one * frames
    reads = [stream[i:i + read] for i in range(0, len(stream), read)]
    best = float("inf")
    for _ in range(repeat):
        decoder = FrameDecoder()
        start = time.process_time()
        got = 0
        for piece in reads:
            got += len(decoder.feed(piece))
        best = min(best, time.process_time() - start)
        if got != frames:
            raise SystemExit(f"{got} frames came out of {frames}")
    return best / frames * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for size, read, frames in CASES:
        us = per_frame_us(size, read, frames, args.repeat)
        print(f"frames of {size:>9,} B in reads of {read:>6,} B: {us:8.2f} us a frame "
              f"({size / us:6.0f} MB/s)")


if __name__ == "__main__":
    main()
