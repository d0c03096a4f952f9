"""Confidence bounds on divergence rates and the sequential test that acts on them.

Two questions, two tools (docs/verification.md, "How the decision is made"):

- *How large is the excess?* (reported): the hits' divergence rate minus the engine's
  own (baseline) rate, with Newcombe's hybrid score interval for a difference of two
  binomial proportions (Wilson score bounds combined; Newcombe 1998, method 10).
- *Has the scope drifted?* (acted on): a one-sided CUSUM of log-likelihood ratios of
  Bernoulli observations, H0 "divergence <= baseline upper bound + budget" against
  H1 "divergence >= p1". Under H0 the likelihood ratio is a non-negative
  supermartingale, so by Ville's inequality a run of checks crosses ln(1/alpha) with
  probability <= alpha; the CUSUM restarts such a run at every check, so N checks
  raise a false alarm with probability <= N * alpha (Lorden 1971).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

BASELINE_Z = 3.0
"""One-sided z of the baseline's upper bound in the test's null (p = 0.00135)."""
REPORT_Z = 1.959964
"""z of the reported interval on the excess (two-sided 95%)."""
MIN_SHIFT = 0.3
"""p1 - p0: the divergence rate the test is tuned to detect fast (a drift that changes
most answers); smaller drifts are detected too, only after more checks."""
MAX_NULL = 0.9
"""No test while p0 (baseline upper bound + budget) is above this: too few baseline
samples yet to tell drift from noise, so nothing is decided (never a quarantine)."""


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (k of n) at `z`; (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def z_for(alpha: float) -> float:
    """The one-sided standard normal quantile for a tail probability `alpha`."""
    return NormalDist().inv_cdf(1 - alpha)


@dataclass(frozen=True, slots=True)
class Excess:
    """Hits' divergence rate minus the baseline's, with its interval (fractions)."""

    estimate: float
    lower: float
    upper: float


def excess(k_hit: int, n_hit: int, k_base: int, n_base: int, z: float = REPORT_Z) -> Excess:
    """Newcombe's hybrid score interval of p_hit - p_base."""
    p1 = k_hit / n_hit if n_hit else 0.0
    p2 = k_base / n_base if n_base else 0.0
    l1, u1 = wilson(k_hit, n_hit, z)
    l2, u2 = wilson(k_base, n_base, z)
    d = p1 - p2
    lower = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    upper = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return Excess(d, max(-1.0, lower), min(1.0, upper))


@dataclass(frozen=True, slots=True)
class Hypotheses:
    """The test's null and alternative divergence rates, and each outcome's step."""

    p0: float
    p1: float
    diverged: float
    """ln(p1/p0): the CUSUM's step on a divergent check."""
    agreed: float
    """ln((1-p1)/(1-p0)): its (negative) step on an agreeing check."""


def hypotheses(k_base: int, n_base: int, budget: float) -> Hypotheses | None:
    """H0 at the baseline's upper bound plus `budget`; None when the baseline is too
    uncertain for a test (then nothing is decided)."""
    p0 = wilson(k_base, n_base, BASELINE_Z)[1] + budget
    if p0 > MAX_NULL:
        return None
    p1 = min(0.999, p0 + MIN_SHIFT)
    return Hypotheses(p0, p1, math.log(p1 / p0), math.log((1 - p1) / (1 - p0)))


def threshold(false_alarm: float) -> float:
    """The CUSUM's alarm level for a false-alarm probability per check: ln(1/alpha)."""
    return math.log(1 / false_alarm)
