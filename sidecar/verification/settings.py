"""What verification is allowed to cost and when it acts (the INFERCACHE_VERIFY_*
settings; a tenant's policy may set its own rate and budget)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.config import VerifyConfig


@dataclass(frozen=True, slots=True)
class VerifySettings:
    """Rates are fractions of eligible requests; budget and false alarm are fractions."""

    rate: float = 0.01
    """Eligible hits re-computed and compared (a tenant's verify_rate overrides)."""
    baseline_rate: float = 0.01
    """Eligible misses computed a second time (the engine's own divergence)."""
    confirm_rate: float = 1.0
    """Rate in a scope whose last checks diverged (suspect), until it clears or acts."""
    budget: float = 0.05
    """Excess divergence over the baseline a scope may show (a tenant's verify_budget
    overrides); more, with confidence, quarantines it."""
    false_alarm: float = 1e-7
    """Probability that one check raises a false quarantine (the test's level)."""
    max_concurrency: int = 8
    """Shadow calls in flight at once; more are skipped."""
    max_per_s: float = 50.0
    """Shadow calls started per second (bursts up to as many); more are skipped."""
    busy_calls: int = 64
    """Skip shadow calls while the gateway has this many real upstream calls open."""
    max_scopes: int = 256
    """Scopes (model version, tenant, prompt version) tracked at once (metric labels)."""
    data_plane: bool = False
    """Verify gRPC Lookup hits whose Store attached a replay (the opt-in)."""

    @classmethod
    def from_config(cls, config: VerifyConfig) -> VerifySettings:
        """The settings as configured."""
        return cls(
            rate=config.rate,
            baseline_rate=config.baseline_rate,
            confirm_rate=config.confirm_rate,
            budget=config.budget,
            false_alarm=config.false_alarm,
            max_concurrency=config.max_concurrency,
            max_per_s=config.max_per_s,
            busy_calls=config.busy_calls,
            max_scopes=config.max_scopes,
            data_plane=config.data_plane,
        )
