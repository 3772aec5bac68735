"""Reading a broker's Prometheus ``/metrics`` for the load driver: scrape, pick samples, and
estimate percentiles from histogram buckets (the way Prometheus' ``histogram_quantile`` does:
linear interpolation inside the bucket that holds the rank)."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: ``{(sample name, sorted label items): value}`` of one scrape.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """One scrape of ``url``; raises ``OSError`` when the endpoint does not answer."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (operator's URL)
        text = resp.read().decode()
    return parse(text)


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly ``labels``, or the sum over every label set when no
    labels are given and the metric has some (e.g. a counter per reason)."""
    key = (name, tuple(sorted(labels.items())))
    if key in samples:
        return samples[key]
    if labels:
        return None
    matching = [v for (n, _), v in samples.items() if n == name]
    return sum(matching) if matching else None


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts (``le`` upper bounds, ascending, ``inf`` last), sum and count."""

    buckets: tuple[tuple[float, float], ...]
    total: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """The observations made between ``earlier`` and this scrape."""
        if earlier is None:
            return self
        before: Mapping[float, float] = dict(earlier.buckets)
        return Histogram(tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
                         self.total - earlier.total, self.count - earlier.count)

    def plus(self, other: Histogram | None) -> Histogram:
        """This histogram and ``other`` (another broker's, with the same buckets) as one."""
        if other is None:
            return self
        theirs: Mapping[float, float] = dict(other.buckets)
        if set(theirs) != {le for le, _ in self.buckets}:
            # cumulative counts of other bounds cannot be added bucket by bucket
            raise ValueError("histograms with different buckets cannot be added")
        return Histogram(tuple((le, c + theirs[le]) for le, c in self.buckets),
                         self.total + other.total, self.count + other.count)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1), or None without observations. Inside the bucket holding
        the rank the value is interpolated linearly; in the ``+Inf`` bucket it is the largest
        finite bound (all a histogram can say)."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return lower_bound
                if c == lower_count:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / (c - lower_count)
            lower_bound, lower_count = le, c
        return lower_bound

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


def label_values(samples: Samples, name: str, label: str) -> list[str]:
    """The values ``label`` takes in the samples of ``name`` (e.g. the shards a per-shard
    gauge reports), sorted as numbers where they are numbers."""
    found = {dict(lbls)[label] for (n, lbls), _ in samples.items()
             if n == name and label in dict(lbls)}
    return sorted(found, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))


def histogram(samples: Samples, name: str, **labels: str) -> Histogram | None:
    """The histogram ``name`` (its ``_bucket``/``_sum``/``_count`` samples), summed over label
    sets other than ``labels``."""
    want = set(labels.items())
    buckets: dict[float, float] = {}
    total = count = 0.0
    found = False
    for (n, lbls), v in samples.items():
        d = dict(lbls)
        if not want <= set(lbls):
            continue
        if n == f"{name}_bucket":
            le = float(d["le"])
            buckets[le] = buckets.get(le, 0.0) + v
            found = True
        elif n == f"{name}_sum":
            total += v
        elif n == f"{name}_count":
            count += v
    if not found:
        return None
    return Histogram(tuple(sorted(buckets.items())), total, count)
