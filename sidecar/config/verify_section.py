"""The shadow verification section (docs/verification.md); same rules as sections.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sidecar.config.parsers as p
from sidecar.config.fields import setting


def _probability(text: str) -> float:
    """A number in (0, 1)."""
    value = p.fraction(text)
    if not 0.0 < value < 1.0:
        raise ValueError(f"expected a number in (0, 1), got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """Sampled shadow verification of hits against the model server."""

    PREFIX: ClassVar[str] = "verify_"
    rate: float = setting(
        0.01,
        "Fraction of reproducible gateway hits (temperature 0 or a seed) re-computed off "
        "the client's path and compared; a tenant's policy verify_rate overrides; 0 = off",
        p.fraction,
    )
    baseline_rate: float = setting(
        0.01,
        "Fraction of reproducible misses computed a second time: the engine's own "
        "divergence, per model version, that hits are judged against",
        p.fraction,
    )
    confirm_rate: float = setting(
        1.0,
        "Rate in a scope whose last checks diverged, until it clears or is quarantined",
        p.fraction,
    )
    budget: float = setting(
        0.05,
        "Divergence of hits over the baseline a scope may show; more, with confidence, "
        "stops its hits (verification_failed); a tenant's verify_budget overrides",
        p.fraction,
    )
    false_alarm: float = setting(
        1e-7,
        "Probability that one check raises a false quarantine (the sequential test's level)",
        _probability,
    )
    max_concurrency: int = setting(
        8, "Most shadow calls in flight; more are skipped", p.positive_int
    )
    max_per_s: float = setting(
        50.0, "Most shadow calls started per second; more are skipped", _positive_float
    )
    busy_calls: int = setting(
        64,
        "Shadow calls are skipped while the gateway has this many real upstream calls open",
        p.positive_int,
    )
    max_scopes: int = setting(
        256,
        "Most (model version, tenant, prompt version) scopes tracked (and labelled) at once",
        p.positive_int,
    )
    data_plane: bool = setting(
        False,
        "Also verify gRPC Lookup hits whose Store attached a replay request (needs the "
        "tenant's retain_inputs)",
    )
