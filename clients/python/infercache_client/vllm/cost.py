"""Load only when it wins: the predicted time to load a prefix vs to recompute it.

Pure (no vLLM, no torch): the connector feeds it measurements and asks it questions.

Inputs, all measured online by this engine's connector:

- each tier's load speed, in seconds per byte: the pool (the worker's copy of pinned
  slots into vLLM's blocks, timed per load) and the warm tier (a promoting lookup's
  time over the bytes it promoted, measured by the scheduler half);
- the engine's prefill speed, in seconds per token, per context length: a prefill step's
  time (from the scheduler handing it out to its output coming back, less the worker's
  own load and save time in it) over the prompt tokens it computed, filed under the
  step's longest context in power-of-two buckets (attention makes a token at 2,000 of
  context dearer than one at 100).

Each input is an exponentially weighted mean of its samples (ALPHA), so the model
follows a link or a load that changes. A load is predicted to take
bytes x (its tier's s/B, plus the pool's for warm blocks: they are promoted into the
pool, then copied like pool blocks); a recompute tokens x (s/token at the context the
recompute ends at, or at the nearest measured bucket). A load is chosen only when
load_s <= margin x recompute_s.

Before a measurement exists (the conservative rule): nothing is skipped on a guess, and
what a guess can cost is bounded. A tier not yet measured to lose is used, and that use
is its measurement: the pool's first load is a local memory copy (host memory, or host
to GPU); the warm tier's first wait is bounded by the sidecar's promotion bound
(`--kv-promote-timeout-ms`, 50 ms by default: past it the lookup answers with what is
hot and says "retry later") and by the connector's lookup_timeout_s. So an unmeasured
slow link costs one request at most that bound, once, and a prefix is never
recomputed because of a prediction that rests on no measurement. Until the prefill
speed is measured (the engine's first prefill step), nothing can be predicted to lose.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

ALPHA = 0.3
"""Weight of a new sample in each mean (the last ~5 samples dominate)."""
DEFAULT_MARGIN = 0.8
"""Load only if predicted at <= 0.8 x the recompute time (a 20% margin for error)."""
MIN_BUCKET = 32
"""Smallest context bucket, in tokens (buckets double from here)."""


class Tier(Enum):
    """Where a prefix's blocks are loaded from."""

    POOL = "pool"
    """The sidecar's shared pool (hot): copied by the worker."""
    WARM = "warm"
    """The warm tier (Redis): promoted into the pool by the sidecar, then copied."""


class Reason(Enum):
    """Why a decision went the way it did."""

    FASTER = "faster"
    SLOWER = "slower"
    UNMEASURED = "unmeasured"


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to load, and the predictions it rests on (None: not measured yet)."""

    load: bool
    reason: Reason
    load_s: float | None
    recompute_s: float | None


class _Mean:
    """An exponentially weighted mean (None until the first sample)."""

    __slots__ = ("samples", "value")

    def __init__(self) -> None:
        self.value: float | None = None
        self.samples = 0

    def add(self, x: float) -> None:
        self.value = x if self.value is None else self.value + ALPHA * (x - self.value)
        self.samples += 1


def bucket(context_tokens: int) -> int:
    """The power-of-two context bucket a step ending at `context_tokens` is filed under."""
    b = MIN_BUCKET
    while b < context_tokens:
        b *= 2
    return b


class LoadCostModel:
    """Per-tier load speed and per-context prefill speed; decides load vs recompute."""

    def __init__(self, *, margin: float = DEFAULT_MARGIN) -> None:
        """`margin` in (0, 1]: the most a load may be predicted to cost, as a fraction of
        the recompute it replaces."""
        if not 0 < margin <= 1:
            raise ValueError("margin must be in (0, 1]")
        self.margin = margin
        self._tiers = {tier: _Mean() for tier in Tier}
        self._prefill: dict[int, _Mean] = {}

    # -- measurements ------------------------------------------------------------------

    def observe_load(self, tier: Tier, nbytes: int, seconds: float) -> None:
        """A load of `nbytes` from `tier` took `seconds` (ignored if either is <= 0)."""
        if nbytes > 0 and seconds > 0:
            self._tiers[tier].add(seconds / nbytes)

    def observe_prefill(self, tokens: int, context_tokens: int, seconds: float) -> None:
        """A step computed `tokens` prompt tokens, the longest ending at `context_tokens`
        of context, in `seconds` of compute (ignored if any is <= 0)."""
        if tokens > 0 and context_tokens > 0 and seconds > 0:
            self._prefill.setdefault(bucket(context_tokens), _Mean()).add(seconds / tokens)

    def prefill_seconds_per_token(self) -> dict[int, float]:
        """The measured prefill time per token, by context bucket (for stats and tests)."""
        return {b: m.value for b, m in sorted(self._prefill.items()) if m.value is not None}

    # -- predictions ---------------------------------------------------------------------

    def seconds_per_byte(self, tier: Tier) -> float | None:
        """The tier's measured load time per byte (warm: promotion only), or None."""
        return self._tiers[tier].value

    def load_s(self, tier: Tier, nbytes: int) -> float | None:
        """Predicted seconds to load `nbytes` from `tier` into vLLM's blocks, or None."""
        pool = self._tiers[Tier.POOL].value
        if tier is Tier.POOL:
            return None if pool is None else nbytes * pool
        warm = self._tiers[Tier.WARM].value
        if warm is None:
            return None
        # Promoted blocks land in the pool and are then copied like any pool block; an
        # unmeasured pool copy is taken as free beside a warm read (it is a memcpy).
        return nbytes * (warm + (pool or 0.0))

    def recompute_s(self, tokens: int, context_tokens: int) -> float | None:
        """Predicted seconds to prefill `tokens` ending at `context_tokens`, or None."""
        if tokens <= 0:
            return 0.0
        if not self._prefill:
            return None
        want = bucket(context_tokens)
        # The bucket itself, else the nearest measured one (ties go to the larger).
        nearest = min(self._prefill, key=lambda b: (abs(b.bit_length() - want.bit_length()), -b))
        per_token = self._prefill[nearest].value
        return None if per_token is None else tokens * per_token

    def decide(self, tier: Tier, nbytes: int, tokens: int, context_tokens: int) -> Decision:
        """Load `nbytes` from `tier` instead of recomputing `tokens` (ending at
        `context_tokens`)? See the module docstring for the rule before measurements."""
        load = self.load_s(tier, nbytes)
        recompute = self.recompute_s(tokens, context_tokens)
        if load is None or recompute is None:
            # Unmeasured: used (bounded), and measured by that use.
            return Decision(True, Reason.UNMEASURED, load, recompute)
        if load <= self.margin * recompute:
            return Decision(True, Reason.FASTER, load, recompute)
        return Decision(False, Reason.SLOWER, load, recompute)
