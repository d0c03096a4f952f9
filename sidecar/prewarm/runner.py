"""Runs a prewarm: check the model server, then for each request look it up, call
the model server on a MISS, and store the answer through ResultCache.store
(one request: prewarm/item.py).

Per request, in order:
  - the key is built for the pod's model (a request naming other weights is skipped);
  - a Lookup HIT is skipped ("already_cached"), a BYPASS too (policy); a lookup or
    a write the warm tier did not answer in time is tried again (twice);
  - the model server is called with the run's concurrency and deadline;
  - the answer is stored with the MISS's lease, so policy, leases, TTL caps and
    size limits apply exactly as to a client's Store.
A run is a task owned by `PrewarmRun`; `stop()` (the RPC ended, was cancelled,
or the server stops) cancels every upstream call in flight and starts no more.
One run at a time per sidecar.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import structlog

from sidecar.config import PrewarmConfig
from sidecar.errors import FailedPrecondition, InvalidArgument
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.keys import KeyRequest
from sidecar.prewarm import records
from sidecar.prewarm.hits import HitRecorder, HitStore, HotRequest
from sidecar.prewarm.item import ItemWarmer, failed
from sidecar.prewarm.progress import (
    NOT_REPLAYABLE,
    PrewarmItem,
    Progress,
    RunOptions,
    RunState,
    Tally,
)
from sidecar.prewarm.upstream import ModelServer, UpstreamFailure
from sidecar.results.cache import ResultCache
from sidecar.wire.openai.answers import PayloadFormat
from sidecar.wire.openai.cache_salt import TenantSalts

log = structlog.get_logger("infercache.prewarm")

# Progress messages are sent at most this often (plus the final one).
_UPDATE_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class PrewarmSettings:
    """Server-side bounds and the model server's identity."""

    model: str
    """The served model name (`model` of every request, checked in GET /v1/models)."""
    base_url: str
    concurrency: int
    max_requests: int
    payload_format: PayloadFormat

    @classmethod
    def from_config(cls, prewarm: PrewarmConfig) -> PrewarmSettings:
        """The settings of INFERCACHE_MODEL_SERVER_* and INFERCACHE_PREWARM_*."""
        return cls(
            model=prewarm.model_server_model,
            base_url=prewarm.model_server_url,
            concurrency=prewarm.concurrency,
            max_requests=prewarm.max_requests,
            payload_format=PayloadFormat(prewarm.payload),
        )


class Prewarmer:
    """Creates prewarm runs for this pod; refuses a second one while one is going."""

    def __init__(
        self,
        cache: ResultCache,
        keys: KeyResolver,
        settings: PrewarmSettings,
        server_factory: Callable[[int], ModelServer],
        hits: HitStore | None = None,
        decode_key: Callable[[bytes], KeyRequest] | None = None,
        recorder: HitRecorder | None = None,
        salts: TenantSalts | None = None,
    ) -> None:
        """`decode_key` turns a hit record's key bytes into a KeyRequest (InvalidArgument
        when it cannot); without it, hit records cannot be replayed. `recorder` keeps
        the record of each answer stored (None: not kept). `salts`: the tenants'
        cache_salt, added to a gateway record's body as the gateway adds it."""
        self.cache = cache
        self.salts = salts
        self._decode_key = decode_key
        self.recorder = recorder
        self.keys = keys
        self.settings = settings
        self._server_factory = server_factory
        self._hits = hits
        self.running = False

    @property
    def pod(self) -> PodIdentity:
        """The pod's identity now (runs replay under the fingerprint in force)."""
        return self.keys.pod

    def check_ready(self, count: int) -> None:
        """Refuse a run this sidecar cannot do, before anything is read or called."""
        if not self.pod.model_version:
            raise FailedPrecondition(
                "prewarm needs the pod's model fingerprint: start the sidecar with --model-path"
            )
        if not self.settings.model:
            raise FailedPrecondition(
                "prewarm needs the served model name: set INFERCACHE_MODEL_SERVER_MODEL"
            )
        if count > self.settings.max_requests:
            raise InvalidArgument(
                "requests",
                f"has {count} requests; the limit is {self.settings.max_requests} "
                "(INFERCACHE_PREWARM_MAX_REQUESTS)",
            )
        if self.running:
            raise FailedPrecondition("a prewarm run is already in progress on this sidecar")

    async def from_version(self, model_version: str, top_k: int) -> list[PrewarmItem]:
        """The top_k most-hit recorded requests of `model_version`, most hit first (fewer
        when the ranking holds fewer; the run's `requested` says how many were asked for).

        This pod's own counts are merged first. The tenant's policy is checked again: a
        record kept while the policy allowed it is not replayed once retention is
        withdrawn (it expires with its TTL)."""
        if not model_version:
            raise InvalidArgument("from_version.model_version", "is required")
        if top_k <= 0:
            raise InvalidArgument("from_version.top_k", "must be at least 1")
        self.check_ready(top_k)
        if self._hits is None or self._decode_key is None:
            raise FailedPrecondition("this sidecar has no hit records")
        if self.recorder is not None:
            await self.recorder.merge()
        return [self._item(hot) for hot in await self._hits.top(model_version, top_k)]

    def _item(self, hot: HotRequest) -> PrewarmItem:
        """The item of one ranked digest: replayable only with an attached request."""
        if hot.request is None:
            detail = f"digest {hot.digest.hex()}: its Store attached no request (or it expired)"
            return PrewarmItem(None, NOT_REPLAYABLE, detail)
        try:
            record = records.decode(hot.request)
        except records.OldRecord as exc:
            return PrewarmItem(None, NOT_REPLAYABLE, str(exc))
        except records.BadRecord as exc:
            return PrewarmItem(None, "bad_record", str(exc))
        assert self._decode_key is not None
        try:
            req = self._decode_key(record.key)
        except InvalidArgument as exc:
            return PrewarmItem(None, "bad_record", str(exc))
        if not self.cache.retains_inputs(req.tenant):
            return PrewarmItem(None, "not_retained", "the tenant's policy forbids it")
        return PrewarmItem(req, record=record)

    def run(self, items: Sequence[PrewarmItem], options: RunOptions) -> PrewarmRun:
        """A run over `items`: `start()`, read `updates()`, and always `stop()` (or use
        `async with run`)."""
        self.check_ready(len(items))
        concurrency = self.settings.concurrency
        if options.concurrency:
            concurrency = min(options.concurrency, concurrency)
        return PrewarmRun(self, list(items), options, self._server_factory, concurrency)


class PrewarmRun:
    """One run: a background task plus the progress it publishes."""

    def __init__(
        self,
        owner: Prewarmer,
        items: list[PrewarmItem],
        options: RunOptions,
        server_factory: Callable[[int], ModelServer],
        concurrency: int,
    ) -> None:
        self._owner = owner
        self._items = items
        self._options = options
        self._server_factory = server_factory
        self._server: ModelServer | None = None
        self._concurrency = concurrency
        replayable = sum(1 for i in items if i.replayable)
        self._tally = Tally(len(items), options.requested, replayable)
        self._state = RunState.RUNNING
        self._error = ""
        self._changed = asyncio.Event()
        self._started = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the run's task; FailedPrecondition if another run is going."""
        if self._owner.running:
            raise FailedPrecondition("a prewarm run is already in progress on this sidecar")
        self._owner.running = True
        self._started = time.monotonic()
        self._server = self._server_factory(self._concurrency)
        self._task = asyncio.create_task(self._main(self._server))

    async def stop(self) -> None:
        """Cancel whatever is still running (no further upstream calls) and release it all."""
        if self._task is None:
            return
        try:
            if not self._task.done():
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        finally:
            self._task = None
            if self._server is not None:
                await self._server.close()
            self._owner.running = False
            t = self._tally
            log.info(
                "prewarm_finished" if self._state is not RunState.RUNNING else "prewarm_cancelled",
                state=self._state.value,
                total=t.total,
                stored=t.stored,
                skipped=dict(t.skipped),
                failed=dict(t.failed),
                requested=t.requested or t.total,
                replayable=t.replayable,
                elapsed_ms=self._elapsed_ms(),
            )

    async def __aenter__(self) -> PrewarmRun:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def snapshot(self) -> Progress:
        """The current progress (takes the pending item reports)."""
        return self._tally.snapshot(
            self._state, self._elapsed_ms(), self._error, self._owner.pod.model_version
        )

    async def updates(self) -> AsyncIterator[Progress]:
        """Snapshots as the run advances (at most every 100 ms), ending with the final one."""
        while True:
            self._changed.clear()
            progress = self.snapshot()
            yield progress
            if progress.state is not RunState.RUNNING:
                return
            await self._changed.wait()
            if self._state is RunState.RUNNING:
                await asyncio.sleep(_UPDATE_INTERVAL_S)

    def _finish(self, state: RunState, error: str = "") -> None:
        self._state = state
        self._error = error
        self._changed.set()

    async def _main(self, server: ModelServer) -> None:
        owner, settings = self._owner, self._owner.settings
        try:
            served = set(await server.served_models())
        except UpstreamFailure as exc:
            self._fail_all(f"model server at {settings.base_url} did not list its models: {exc}")
            return
        if settings.model not in served:
            listed = sorted(served)[:10]
            self._fail_all(
                f"model server at {settings.base_url} serves {listed}, not {settings.model!r} "
                "(INFERCACHE_MODEL_SERVER_MODEL)"
            )
            return
        warmer = ItemWarmer(
            owner.cache,
            owner.keys,
            model=settings.model,
            payload_format=settings.payload_format,
            ttl_s=self._options.ttl_s,
            served=served,
            recorder=owner.recorder,
            salts=owner.salts,
        )
        log.info(
            "prewarm_started",
            total=len(self._items),
            concurrency=self._concurrency,
            model_version=self._owner.pod.model_version,
        )
        budget_blown = asyncio.Event()
        queue = iter(enumerate(self._items))
        workers = [
            asyncio.create_task(self._worker(warmer, server, queue, budget_blown))
            for _ in range(self._concurrency)
        ]
        everything: asyncio.Future[list[None]] = asyncio.gather(*workers)
        blown = asyncio.create_task(budget_blown.wait())
        try:
            waiting: list[asyncio.Future[Any]] = [everything, blown]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            blown.cancel()
            for w in workers:
                w.cancel()
            await asyncio.gather(everything, blown, return_exceptions=True)
        if budget_blown.is_set():
            self._finish(RunState.FAILURE_BUDGET_EXCEEDED)
        else:
            everything.result()  # a bug in a worker surfaces here, not as a silent success
            self._finish(RunState.COMPLETED)

    def _fail_all(self, error: str) -> None:
        log.warning("prewarm_model_server_check_failed", error=error)
        for i in range(len(self._items)):
            self._tally.add(failed(i, "model_server_check"))
        self._tally.reports.clear()  # one error says it; no per-item noise
        self._finish(RunState.FAILED, error)

    async def _worker(
        self,
        warmer: ItemWarmer,
        server: ModelServer,
        queue: Iterator[tuple[int, PrewarmItem]],
        budget_blown: asyncio.Event,
    ) -> None:
        # Workers share one iterator: each takes the next request when it is free.
        limit = self._options.max_failures
        for index, item in queue:
            report = await warmer.warm(server, index, item)
            self._tally.add(report)
            self._changed.set()
            if limit is not None and self._tally.failed.total() > limit:
                budget_blown.set()
                return
