"""Prefix probes off vLLM's engine loop.

get_num_new_matched_tokens runs on the engine loop, between forward passes of every
running request. A probe (one LookupPrefix, deadline lookup_timeout_s) runs on a small
thread pool; the scheduler waits for it at most INLINE_WAIT_S, which a healthy sidecar
answers within. A probe still running then is left to finish in the background: the
scheduler tells vLLM "not known yet" (None), vLLM keeps stepping the other requests and
asks again next step, and the request is scheduled once its probe answered, at most
lookup_timeout_s after it was asked. A frozen sidecar thus delays each new request by
at most lookup_timeout_s and pauses the running ones by at most INLINE_WAIT_S.

A probe either waits for the warm tier (the sidecar promotes what it holds of the chain,
within its own bound; the time it took and what it promoted measure the tier) or, once
the warm tier is measured to lose, asks the pool alone (hot_only). A pool-only probe
that falls short of the chain is followed by a warm sample: a promoting lookup of at
most WARM_SAMPLE_BLOCKS blocks past what the pool held, in the background (no request
waits for it), at most one at a time and one per WARM_SAMPLE_INTERVAL_S. It keeps the
measurement current (a link that recovers is seen) and says whether the warm tier
held the request's next blocks: only then is the request counted as a skipped load.

A probe that answers short of a block whose save is still committing (inflight.py)
looks again, RETRY_PAUSE_S later, within the same deadline.

A probe that found blocks answers them still pinned (Held), so that the scheduler's pin
needs no second LookupPrefix: its lease is not renewed, so unless the pin takes it over
within HELD_FRACTION of its ttl it is released by whoever drops it, and expires on the
sidecar at worst. Any doubt (an older hold, another attachment) means a fresh lookup.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

from infercache_client.kv.client import HotTier
from infercache_client.vllm.cost import Reason
from infercache_client.vllm.gauge import LoadGauge
from infercache_client.vllm.inflight import InFlightSaves
from infercache_client.vllm.link import SidecarLink

INLINE_WAIT_S = 0.02
"""The most the engine loop waits for a probe before asking vLLM to come back."""
WORKERS = 4
"""Probes in flight at once (more wait in the pool's queue, within their own deadline)."""
WARM_SAMPLE_BLOCKS = 4
"""Most blocks a warm sample promotes (its cost on the link)."""
WARM_SAMPLE_INTERVAL_S = 1.0
"""Least time between two warm samples' starts."""
RETRY_PAUSE_S = 0.002
"""How long a probe waiting for a save in flight pauses before it looks again."""
HELD_FRACTION = 1 / 3
"""A hold older than this fraction of its lease's ttl is not taken over (the renewer,
which takes it over, renews at a third of the ttl counted from then)."""


@dataclass(frozen=True, slots=True)
class Held:
    """The blocks a probe found, pinned under its (not renewed) lease."""

    tier: HotTier
    slot_ids: tuple[int, ...]
    slot_generations: tuple[int, ...]
    lease_id: str
    ttl_ms: int
    answered_at: float
    """time.monotonic() when the sidecar answered."""

    def usable(self, tier: HotTier | None, blocks: int, now: float) -> bool:
        """Still the link's attachment, young enough, and covering `blocks` blocks."""
        young = now - self.answered_at < self.ttl_ms / 1000 * HELD_FRACTION
        return tier is self.tier and young and len(self.slot_ids) >= blocks


@dataclass(frozen=True, slots=True)
class Answer:
    """What a probe found: `matched` blocks (of which `promoted` came from the warm tier),
    pinned by `held` (the caller takes it over or drop()s it)."""

    matched: int
    promoted: int = 0
    retry_later: bool = False
    seconds: float = 0.0
    held: Held | None = None


@dataclass(frozen=True, slots=True)
class _Probe:
    future: Future[Answer]
    hashes: list[bytes]
    salt: str
    usable: int
    skipped_warm: Reason | None
    """Why this probe did not wait for the warm tier (None: it did)."""
    deadline: float


class PrefixProbes:
    """One probe per request id, started once and taken once answered."""

    def __init__(
        self,
        link: SidecarLink,
        gauge: LoadGauge,
        *,
        tenant: str,
        timeout_s: float,
        in_flight: InFlightSaves | None = None,
    ) -> None:
        """`timeout_s` bounds a probe from its start, time in the pool's queue included;
        promoting probes report their speed to `gauge`; `in_flight`: the saves whose
        commit a short answer waits for."""
        self._link = link
        self._gauge = gauge
        self._in_flight = in_flight
        self._sampling = False
        self._next_sample = 0.0
        self._tenant = tenant
        self._timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="infercache-probe")
        self._running: dict[str, _Probe] = {}
        self._waited: set[str] = set()

    def running(self, req_id: str) -> bool:
        """A probe for `req_id` was started and not taken yet."""
        return req_id in self._running

    def start(
        self,
        req_id: str,
        hashes: list[bytes],
        salt: str,
        usable: int,
        skip_warm: Reason | None,
    ) -> None:
        """Look up the first `usable` of `hashes` (the request's chain) in the background;
        `skip_warm`: ask the pool alone, and why (None: wait for the warm tier too)."""
        deadline = time.monotonic() + self._timeout_s
        hot_only = skip_warm is not None
        future = self._pool.submit(self._probe, hashes[:usable], salt, deadline, hot_only)
        self._running[req_id] = _Probe(future, hashes, salt, usable, skip_warm, deadline)

    def take(self, req_id: str, wait_s: float) -> tuple[Answer, list[bytes]] | None:
        """(what the probe found, the chain) once it answered, else None. The first call
        for a probe waits up to `wait_s`, later ones not at all. A failed probe answers 0.
        The caller owns the answer's hold: it takes it over or drop()s it."""
        probe = self._running[req_id]
        if req_id in self._waited:
            wait_s = 0.0
        try:
            answer = probe.future.result(timeout=wait_s)
        except FutureTimeout:
            self._waited.add(req_id)
            return None
        except CancelledError:  # closed under it (engine shutdown): a miss
            answer = Answer(0)
        if self._in_flight is not None:
            coming = self._in_flight.extent(probe.hashes, probe.usable)
            if answer.matched < coming and time.monotonic() + RETRY_PAUSE_S < probe.deadline:
                self.drop(answer.held)
                self._look_again(req_id, probe)
                return None
            self._in_flight.found(probe.hashes, answer.matched)
        self._waited.discard(req_id)
        del self._running[req_id]
        why = probe.skipped_warm
        if why is None and (answer.promoted or answer.retry_later):
            self._gauge.warm_sample(answer.promoted, answer.retry_later, answer.seconds, None)
        elif why is not None and answer.matched < probe.usable:
            self._sample_warm(probe, answer.matched, why)
        return answer, probe.hashes

    def _look_again(self, req_id: str, probe: _Probe) -> None:
        """A save of the chain is committing: the same lookup, after a pause."""
        hot_only = probe.skipped_warm is not None
        chain = probe.hashes[: probe.usable]
        future = self._pool.submit(
            self._probe, chain, probe.salt, probe.deadline, hot_only, RETRY_PAUSE_S
        )
        self._running[req_id] = replace(probe, future=future)
        self._waited.add(req_id)

    def _sample_warm(self, probe: _Probe, hot: int, why: Reason) -> None:
        """The pool held `hot` blocks of the chain and the probe did not ask the warm tier
        (`why`): promote a few of the next blocks in the background, unless a sample
        runs or the last one started less than WARM_SAMPLE_INTERVAL_S ago."""
        now = time.monotonic()
        if self._sampling or now < self._next_sample:
            return
        self._sampling = True
        self._next_sample = now + WARM_SAMPLE_INTERVAL_S
        chain = probe.hashes[: min(probe.usable, hot + WARM_SAMPLE_BLOCKS)]
        deadline = now + self._timeout_s
        future = self._pool.submit(self._probe, chain, probe.salt, deadline, False)
        future.add_done_callback(lambda f: self._sampled(f, why))

    def _sampled(self, future: Future[Answer], why: Reason) -> None:
        self._sampling = False
        if future.cancelled() or future.exception() is not None:
            return
        answer = future.result()
        self.drop(answer.held)
        self._gauge.warm_sample(answer.promoted, answer.retry_later, answer.seconds, why)

    def forget(self, req_id: str) -> None:
        """The request is gone: its probe's answer is not wanted (its hold is released)."""
        probe = self._running.pop(req_id, None)
        self._waited.discard(req_id)
        if probe is not None:
            probe.future.add_done_callback(self._drop_answer)

    def drop(self, held: Held | None) -> None:
        """Release a hold nobody takes over (in the background)."""
        if held is not None:
            self._link.release(held.tier, held.lease_id)

    def _drop_answer(self, future: Future[Answer]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.drop(future.result().held)

    def close(self) -> None:
        """Stop taking probes (those in flight end within their deadline)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _probe(
        self, hashes: list[bytes], salt: str, deadline: float, hot_only: bool, pause_s: float = 0.0
    ) -> Answer:
        if pause_s:
            time.sleep(pause_s)  # a pool thread, not the engine loop
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Answer(0)  # queued behind slow probes past its own bound: a miss
        tenant = self._tenant

        def lookup(tier: Any) -> Answer:
            started = time.perf_counter()
            match = tier.lookup_prefix(
                tenant, hashes, cache_salt=salt, timeout_s=remaining, hot_only=hot_only
            )
            seconds = time.perf_counter() - started
            matched, lease = int(match.matched_blocks), match.lease
            promoted, retry_later = int(match.promoted_blocks), bool(match.retry_later)
            held = None
            if lease is not None and not matched:
                self._link.release(tier, lease.lease_id)
            elif lease is not None:
                # Not renewed: vLLM may ask again, or never schedule the request; the pin
                # takes it over (and renews it), or it is released, or it expires.
                if tier.renewer is not None:
                    tier.renewer.forget(lease.lease_id)
                held = Held(
                    tier,
                    tuple(match.slot_ids),
                    tuple(match.slot_generations),
                    lease.lease_id,
                    int(getattr(lease, "ttl_ms", 0)),
                    time.monotonic(),
                )
            return Answer(matched, promoted, retry_later, seconds, held)

        return self._link.call("prefix lookup", lookup) or Answer(0)
