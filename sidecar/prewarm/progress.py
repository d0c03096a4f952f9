"""Value objects of a prewarm run: items in, per-item reports and progress snapshots out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from sidecar.keys import KeyRequest
from sidecar.prewarm.records import HitRecord

# Skipped/failed item reports carried by one progress message at most.
MAX_REPORTS_PER_UPDATE = 100
NOT_REPLAYABLE = "not_replayable"
"""The skip reason of a request that carries no model-server request to send."""


class RunState(Enum):
    """Whether a run is going and how it ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILURE_BUDGET_EXCEEDED = "failure_budget_exceeded"
    FAILED = "failed"


class ItemOutcome(Enum):
    """What happened to one request."""

    STORED = "stored"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PrewarmItem:
    """One request to replay: its key and its record (the key's wire form and the
    model-server request that computes it; None: skipped not_replayable), or why
    there is none (`request` None)."""

    request: KeyRequest | None
    skip_reason: str = ""
    detail: str = ""
    record: HitRecord | None = None

    @property
    def replayable(self) -> bool:
        """A key and a record whose answer prewarm can store (records.unreplayable)."""
        return (
            self.request is not None
            and self.record is not None
            and not (self.record.unreplayable())
        )


@dataclass(frozen=True, slots=True)
class ItemReport:
    """A request that was not stored: its position, outcome, reason label and detail."""

    index: int
    outcome: ItemOutcome
    reason: str
    detail: str = ""
    digest: bytes = b""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Per-run choices: TTL of stored results (0 = default), upstream concurrency
    (0 = server default), the failure budget (None = never stop early) and how many
    requests were asked for (0 = the run's items; from_version: its top_k, which the
    ranking may not hold)."""

    ttl_s: int = 0
    concurrency: int = 0
    max_failures: int | None = None
    requested: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    """A snapshot of a run; `items` holds the reports since the previous snapshot."""

    state: RunState
    total: int
    done: int
    stored: int
    skipped: int
    failed: int
    skipped_by_reason: Mapping[str, int]
    failed_by_reason: Mapping[str, int]
    elapsed_ms: int
    eta_ms: int
    items: tuple[ItemReport, ...] = ()
    error: str = ""
    model_version: str = ""
    requested: int = 0
    """Requests asked for (from_version's top_k); `total` may be fewer."""
    replayable: int = 0
    """Of `total`, the requests with a model-server request to send."""


@dataclass(slots=True)
class Tally:
    """Mutable counts of a run (event loop only)."""

    total: int
    requested: int = 0
    replayable: int = 0
    stored: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    reports: list[ItemReport] = field(default_factory=list)

    @property
    def done(self) -> int:
        """Requests finished."""
        return self.stored + self.skipped.total() + self.failed.total()

    def add(self, report: ItemReport | None) -> None:
        """Count one finished request (None = stored)."""
        if report is None:
            self.stored += 1
            return
        if report.outcome is ItemOutcome.SKIPPED:
            self.skipped[report.reason] += 1
        else:
            self.failed[report.reason] += 1
        if len(self.reports) < MAX_REPORTS_PER_UPDATE:
            self.reports.append(report)

    def snapshot(
        self, state: RunState, elapsed_ms: int, error: str = "", model_version: str = ""
    ) -> Progress:
        """A Progress; takes (and clears) the pending reports."""
        done = self.done
        eta = 0
        if state is RunState.RUNNING and done:
            eta = elapsed_ms * (self.total - done) // done
        reports, self.reports = tuple(self.reports), []
        return Progress(
            state=state,
            total=self.total,
            done=done,
            stored=self.stored,
            skipped=self.skipped.total(),
            failed=self.failed.total(),
            skipped_by_reason=dict(self.skipped),
            failed_by_reason=dict(self.failed),
            elapsed_ms=elapsed_ms,
            eta_ms=eta,
            items=reports,
            error=error,
            model_version=model_version,
            requested=self.requested or self.total,
            replayable=self.replayable,
        )
