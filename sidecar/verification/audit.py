"""The durable audit of quarantine, acknowledgement and release events.

Each sidecar writes every event of its own ledger once, with its member id, to the
fleet's event log (on Redis: a signed stream next to the invalidation audit, so an
operator still sees them after a restart); the embedded store keeps them in memory only
(Ledger.events, as before). Writes happen off the path that raised the event: a bounded
queue and one writer task, a failed write logged and counted, never retried forever.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from sidecar.errors import TierUnavailable
from sidecar.verification.bounds import Excess
from sidecar.verification.ledger import Event, Scope

log = structlog.get_logger("infercache.verification")

CLOSE_TIMEOUT_S = 2.0
"""Longest a shutdown waits for queued events to be written."""


@dataclass(frozen=True, slots=True)
class AuditedEvent:
    """An event as the log keeps it: which sidecar's ledger raised it."""

    member_id: str
    event: Event


class EventLog(Protocol):
    """Where the fleet's verification events are kept. Methods raise TierUnavailable
    when the backend fails, and nothing else."""

    async def append(self, member_id: str, event: Event) -> None:
        """Keep one event of `member_id`'s ledger."""
        ...

    async def newest(self, limit: int) -> list[AuditedEvent]:
        """Up to `limit` events, newest first; one that fails its check is left out."""
        ...


class MemoryEventLog:
    """EventLog in process memory (the fake for tests; lost on restart)."""

    def __init__(self) -> None:
        self.kept: list[AuditedEvent] = []

    async def append(self, member_id: str, event: Event) -> None:
        """Keep it."""
        self.kept.append(AuditedEvent(member_id, event))

    async def newest(self, limit: int) -> list[AuditedEvent]:
        """Newest first."""
        return self.kept[::-1][:limit]


def event_json(event: Event) -> bytes:
    """The event as canonical JSON (what a durable log signs and stores)."""
    s = event.scope
    doc = {
        "time_ms": event.time_ms,
        "scope": [s.model_version, s.tenant, s.prompt_version],
        "action": event.action,
        "caller": event.caller,
        "reason": event.reason,
        "checks": event.checks,
        "diverged": event.diverged,
        "baseline": [event.baseline_checks, event.baseline_diverged],
        "excess": [event.excess.estimate, event.excess.lower, event.excess.upper],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def event_from_json(data: bytes) -> Event:
    """Inverse of event_json; ValueError when it does not decode."""
    try:
        doc: dict[str, Any] = json.loads(data)
        version, tenant, prompt = (str(x) for x in doc["scope"])
        base_checks, base_diverged = (int(x) for x in doc["baseline"])
        estimate, lower, upper = (float(x) for x in doc["excess"])
        return Event(
            int(doc["time_ms"]),
            Scope(version, tenant, prompt),
            str(doc["action"]),
            str(doc["caller"]),
            str(doc["reason"]),
            int(doc["checks"]),
            int(doc["diverged"]),
            base_checks,
            base_diverged,
            Excess(estimate, lower, upper),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a verification event: {exc}") from exc


class EventWriter:
    """Writes a ledger's events to `log` as `member_id`, in the background.

    `add` is the ledger's event hook (sync, O(1)); at most `max_pending` events wait,
    further ones are dropped and counted (they are still logged and in Ledger.events).
    """

    def __init__(self, log: EventLog, member_id: str, *, max_pending: int = 64) -> None:
        self.log = log
        self.member_id = member_id
        self._max = max_pending
        self._queue: deque[Event] = deque()
        self._writer: asyncio.Task[None] | None = None
        self.written = 0
        self.failed = 0
        self.dropped = 0

    def add(self, event: Event) -> None:
        """Queue one event for the log."""
        if len(self._queue) >= self._max:
            self.dropped += 1
            return
        self._queue.append(event)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._queue:
            event = self._queue.popleft()
            try:
                await self.log.append(self.member_id, event)
                self.written += 1
            except TierUnavailable as exc:
                self.failed += 1
                log.warning("verification_event_not_audited", action=event.action, error=str(exc))

    async def drain(self) -> None:
        """Wait until every queued event is written (or failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Write what is queued, for at most `timeout_s` (a slow store must not hold a
        shutdown)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.drain()
        except TimeoutError:
            pass
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
