"""The process's peak resident memory, measured from a reset (Linux).

``getrusage``'s ``ru_maxrss`` is the peak of the process's whole life: once an earlier test
raised it, a later test's allocation below that peak does not show, and a check "the peak grew
by less than N MiB" cannot fail. Writing ``5`` to ``/proc/self/clear_refs`` resets the peak
(``VmHWM``) to the current resident size, so each measurement starts from where it is taken.
"""

from __future__ import annotations

from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss_mib() -> float:
    """Reset the peak resident size to the current one and return it (MiB)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmHWM") / 1024


def peak_rss_mib() -> float:
    """The peak resident size since the last :func:`reset_peak_rss_mib` (MiB)."""
    return _status_kib("VmHWM") / 1024
