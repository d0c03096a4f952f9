"""The shadow calls themselves: capped, rate-limited, yielding to real traffic, never
stored and never counted as traffic.

A check is started only when the concurrency cap has room, the rate limit has a token
and the gateway is not busy (INFERCACHE_VERIFY_*); otherwise it is skipped and counted
(`infercache_verify_checks_total{result="skipped_*"}`). It runs as a task of its own:
the client's answer has gone out before it starts and never waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from sidecar.prewarm.upstream import ModelServer, UpstreamFailure
from sidecar.verification.ledger import Event, Ledger, Scope
from sidecar.verification.sampling import TokenBucket
from sidecar.wire.openai.answers import UpstreamCall
from sidecar.wire.openai.compare import Comparable, comparable, first_text

log = structlog.get_logger("infercache.verification")

Fresh = Callable[[], Awaitable[bytes | None]]
"""Makes the shadow call; the fresh answer's bytes, or None when there is none to judge."""
Replay = Callable[[], Awaitable[UpstreamCall | str]]
"""Finds the request to re-send (a hit record's): the call, or why there is none (the
check's result label: no_record, unjudged, failed)."""


def log_event(event: Event) -> None:
    """Log a quarantine event once (the audit trail is Ledger.events)."""
    s = event.scope
    log.warning(
        f"verification_{event.action}",
        model_version=s.model_version,
        tenant=s.tenant,
        prompt_version=s.prompt_version,
        caller=event.caller,
        reason=event.reason,
        checks=event.checks,
        diverged=event.diverged,
        baseline_checks=event.baseline_checks,
        baseline_diverged=event.baseline_diverged,
        excess=round(event.excess.estimate, 4),
        excess_lower=round(event.excess.lower, 4),
    )


class ShadowRunner:
    """Starts shadow calls to `server` and records their verdicts in `ledger`."""

    def __init__(
        self,
        ledger: Ledger,
        server: ModelServer,
        *,
        busy: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self.server = server
        self.busy = busy
        """True while real traffic needs the model server (the gateway sets it)."""
        settings = ledger.settings
        self._cap = settings.max_concurrency
        self._bucket = TokenBucket(settings.max_per_s, clock)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """Shadow calls running now."""
        return len(self._tasks)

    def admit(self, model_version: str, kind: str) -> bool:
        """May a sampled check start now? Counts why not."""
        why = ""
        if self.busy():
            why = "skipped_busy"
        elif len(self._tasks) >= self._cap:
            why = "skipped_concurrency"
        elif not self._bucket.take():
            why = "skipped_rate"
        if why:
            self.ledger.count(model_version, kind, why)
            return False
        return True

    def call(self, call: UpstreamCall) -> Fresh:
        """The shadow call of `call` through the model server, its body as is."""

        async def fresh() -> bytes | None:
            received = await self.server.complete(call)
            return received.body

        return fresh

    def check_hit(self, scope: Scope, fresh: Fresh, cached: bytes, budget: float) -> None:
        """Compare a fresh answer with a hit's cached one (admitted already)."""
        self.ledger.started(scope)
        self._spawn(self._hit(scope, fresh, cached, budget))

    def check_miss(
        self, model_version: str, fresh: Fresh, first: bytes, *, raw_text: bool = False
    ) -> None:
        """Compare a second computation of a miss with its first (admitted already);
        `raw_text` as in check_replay."""
        self._spawn(self._miss(model_version, fresh, first, raw_text))

    def check_replay(self, scope: Scope, replay: Replay, cached: bytes, budget: float) -> None:
        """A gRPC hit (admitted already): find its recorded request, re-send it, compare.
        A cached value that is not an OpenAI answer is compared, exactly, with the fresh
        answer's first choice text (the text form a caller may store)."""
        self.ledger.started(scope)
        self._spawn(self._replayed(scope, replay, cached, budget))

    async def _hit(self, scope: Scope, fresh: Fresh, cached: bytes, budget: float) -> None:
        try:
            verdict = await self._judge(scope.model_version, "hit", fresh, cached)
        finally:
            self.ledger.finished(scope)
        if verdict is not None:
            self.ledger.record_hit(scope, verdict, budget)

    async def _replayed(self, scope: Scope, replay: Replay, cached: bytes, budget: float) -> None:
        version = scope.model_version
        try:
            found = await replay()
            if isinstance(found, str):
                self.ledger.count(version, "hit", found)
                return
            verdict = await self._judge(version, "hit", self.call(found), cached, raw_text=True)
        finally:
            self.ledger.finished(scope)
        if verdict is not None:
            self.ledger.record_hit(scope, verdict, budget)

    async def _miss(self, model_version: str, fresh: Fresh, first: bytes, raw_text: bool) -> None:
        verdict = await self._judge(model_version, "baseline", fresh, first, raw_text=raw_text)
        if verdict is not None:
            self.ledger.record_baseline(model_version, verdict)

    async def _judge(
        self, model_version: str, kind: str, fresh: Fresh, old: bytes, *, raw_text: bool = False
    ) -> bool | None:
        """True when the answers diverge; None (counted) when there is nothing to judge.
        `raw_text`: an `old` that is no OpenAI answer is the first choice's text."""
        before = comparable(old)
        if before is None and not raw_text:
            self.ledger.count(model_version, kind, "unjudged")
            return None
        try:
            body = await fresh()
        except UpstreamFailure as exc:
            self.ledger.count(model_version, kind, "failed")
            log.info("verification_call_failed", reason=exc.reason, kind=kind)
            return None
        after = comparable(body) if body is not None else None
        if after is None or not _finished(after):
            # A cut stream or an error body is no evidence about the model's answer.
            self.ledger.count(model_version, kind, "failed")
            return None
        if before is None:
            return old != first_text(after)
        return before != after

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait for the calls in flight now (benches and tests)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel the calls in flight and close the connections."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.close()


def _finished(answer: Comparable) -> bool:
    return bool(answer) and all(choice[4] for choice in answer)
