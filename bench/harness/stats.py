"""Order statistics for the reports: median, quartiles and nearest-rank percentiles.

NaN samples (a slice whose /proc reading failed) are left out of every figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def _finite(xs: Iterable[float]) -> list[float]:
    return sorted(x for x in xs if x == x)


def median(xs: Iterable[float]) -> float:
    """The median, NaN for no samples."""
    s = _finite(xs)
    return statistics.median(s) if s else math.nan


def quartiles(xs: Iterable[float]) -> tuple[float, float]:
    """First and third quartile (statistics.quantiles, exclusive); NaN under two samples."""
    s = _finite(xs)
    if len(s) < 2:
        return math.nan, math.nan
    q = statistics.quantiles(s, n=4)
    return q[0], q[2]


def percentile(xs: Iterable[float], q: float) -> float:
    """Nearest-rank percentile, 0 < q <= 1 (p99 of 20 samples is their maximum); NaN if empty."""
    s = _finite(xs)
    if not s:
        return math.nan
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
