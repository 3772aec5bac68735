"""Pieces the benchmark scripts share."""

from __future__ import annotations

from pathlib import Path


def write_kcat_payload(path: Path, messages: int, size: int) -> tuple[int, float]:
    """Write whole thousands of ``size``-byte messages, one per line, for ``kcat -P -l``;
    return how many were written and their megabytes. kcat strips the newline, so each value
    is ``size - 1`` bytes plus the delimiter."""
    line = b"m" * (size - 1) + b"\n"
    with open(path, "wb") as f:
        for _ in range(messages // 10_000):
            f.write(line * 10_000)
    n = (messages // 10_000) * 10_000
    return n, n * size / (1 << 20)
