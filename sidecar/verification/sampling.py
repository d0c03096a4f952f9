"""Which hits and misses are re-computed: jittered systematic sampling, and the shadow
calls' rate limit.

A Bernoulli sample at 1% leaves gaps of any length between checks (a 5% chance of more
than 300 unchecked hits in a row); a drift is first seen at the first check after it,
so the gap is what decides how many wrong hits are served. A countdown drawn uniformly
from [0.5/rate, 1.5/rate] checks the same fraction on average, never leaves more than
1.5/rate hits unchecked, and its jitter keeps it from locking onto periodic traffic.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Countdown:
    """Says yes once every ~1/rate calls (jittered); the rate may change between calls."""

    __slots__ = ("_left", "_rate", "_rng")

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._rate = 0.0
        self._left = 0.0

    def due(self, rate: float) -> bool:
        """One more eligible call at `rate` (0..1): is this one checked?"""
        if rate <= 0.0:
            return False
        if rate >= 1.0:
            return True
        if rate != self._rate:
            # A new rate (a policy reload, a scope turning suspect): draw a gap for it.
            self._rate = rate
            self._left = self._gap(rate)
        self._left -= 1
        if self._left > 0:
            return False
        self._left += self._gap(rate)
        return True

    def _gap(self, rate: float) -> float:
        return self._rng.uniform(0.5, 1.5) / rate


class TokenBucket:
    """At most `per_s` takes a second on average, bursts up to `per_s` (clock in s)."""

    __slots__ = ("_at", "_clock", "_per_s", "_tokens")

    def __init__(self, per_s: float, clock: Callable[[], float]) -> None:
        self._per_s = per_s
        self._clock = clock
        self._tokens = per_s
        self._at = clock()

    def take(self) -> bool:
        """One token if there is one."""
        now = self._clock()
        self._tokens = min(self._per_s, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
