"""The verification part of `infercache stats` (docs/verification.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict
from infercache.v1 import admin_pb2 as PB2
from rich.table import Table


def verification_dict(resp: PB2.GetStatsResponse) -> dict[str, Any]:
    """GetStats' verification part as JSON-ready data."""
    return {
        "scopes": [
            MessageToDict(
                s, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            for s in resp.verification
        ],
        "events": [
            MessageToDict(e, preserving_proto_field_name=True) for e in resp.verification_events
        ],
        "counts": dict(sorted(resp.verification_counts.items())),
    }


def verification_table(
    resp: PB2.GetStatsResponse, short: Callable[[str], str], table: Callable[..., Table]
) -> Table | None:
    """One row per tracked scope: state, checks, divergence rates and the excess with its
    95% interval (None when nothing was checked)."""
    if not resp.verification:
        return None
    out: Table = table(
        "verification: hits re-computed and compared (excess = hits' divergence - baseline)",
        (
            "model\nversion",
            "tenant",
            "prompt\nversion",
            "state",
            "checks",
            "diverged",
            "baseline",
            "excess [95%]",
        ),
    )
    for s in resp.verification:
        base = f"{s.baseline_diverged}/{s.baseline_checks}"
        band = f"{s.excess:+.3f} [{s.excess_lower:+.3f}, {s.excess_upper:+.3f}]"
        out.add_row(
            short(s.scope.model_version),
            s.scope.tenant,
            s.scope.prompt_version,
            s.state,
            str(s.checks),
            str(s.diverged),
            base,
            band,
        )
    return out
