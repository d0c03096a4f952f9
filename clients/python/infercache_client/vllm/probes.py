"""Prefix probes off vLLM's engine loop.

get_num_new_matched_tokens runs on the engine loop, between forward passes of every
running request. A probe (one LookupPrefix, deadline lookup_timeout_s) runs on a small
thread pool; the scheduler waits for it at most INLINE_WAIT_S, which a healthy sidecar
answers within. A probe still running then is left to finish in the background: the
scheduler tells vLLM "not known yet" (None), vLLM keeps stepping the other requests and
asks again next step, and the request is scheduled once its probe answered, at most
lookup_timeout_s after it was asked. A frozen sidecar thus delays each new request by
at most lookup_timeout_s and pauses the running ones by at most INLINE_WAIT_S.

A probe that found blocks answers them still pinned (Held), so that the scheduler's pin
needs no second LookupPrefix: its lease is not renewed, so unless the pin takes it over
within HELD_FRACTION of its ttl it is released by whoever drops it, and expires on the
sidecar at worst. Any doubt (an older hold, another attachment) means a fresh lookup.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from infercache_client.kv.client import HotTier
from infercache_client.vllm.link import SidecarLink

INLINE_WAIT_S = 0.02
"""The most the engine loop waits for a probe before asking vLLM to come back."""
WORKERS = 4
"""Probes in flight at once (more wait in the pool's queue, within their own deadline)."""


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


Answer = tuple[int, Held | None]


@dataclass(frozen=True, slots=True)
class _Probe:
    future: Future[Answer]
    hashes: list[bytes]


class PrefixProbes:
    """One probe per request id, started once and taken once answered."""

    def __init__(self, link: SidecarLink, *, tenant: str, timeout_s: float) -> None:
        """`timeout_s` bounds a probe from its start, time in the pool's queue included."""
        self._link = link
        self._tenant = tenant
        self._timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="infercache-probe")
        self._running: dict[str, _Probe] = {}

    def running(self, req_id: str) -> bool:
        """A probe for `req_id` was started and not taken yet."""
        return req_id in self._running

    def start(self, req_id: str, hashes: list[bytes], salt: str, usable: int) -> None:
        """Look up the first `usable` of `hashes` (the request's chain) in the background."""
        deadline = time.monotonic() + self._timeout_s
        future = self._pool.submit(self._probe, hashes[:usable], salt, deadline)
        self._running[req_id] = _Probe(future, hashes)

    def take(self, req_id: str, wait_s: float) -> tuple[int, list[bytes], Held | None] | None:
        """(matched blocks, the chain, the blocks still pinned) once the probe answered
        (waiting up to `wait_s`), else None. A failed probe answers 0. The caller owns the
        hold: it takes it over or drop()s it."""
        probe = self._running[req_id]
        try:
            matched, held = probe.future.result(timeout=wait_s)
        except FutureTimeout:
            return None
        except CancelledError:  # closed under it (engine shutdown): a miss
            matched, held = 0, None
        del self._running[req_id]
        return matched, probe.hashes, held

    def forget(self, req_id: str) -> None:
        """The request is gone: its probe's answer is not wanted (its hold is released)."""
        probe = self._running.pop(req_id, None)
        if probe is not None:
            probe.future.add_done_callback(self._drop_answer)

    def drop(self, held: Held | None) -> None:
        """Release a hold nobody takes over (in the background)."""
        if held is not None:
            self._link.release(held.tier, held.lease_id)

    def _drop_answer(self, future: Future[Answer]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.drop(future.result()[1])

    def close(self) -> None:
        """Stop taking probes (those in flight end within their deadline)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _probe(self, hashes: list[bytes], salt: str, deadline: float) -> Answer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 0, None  # queued behind slow probes past its own bound: a miss
        tenant = self._tenant

        def lookup(tier: Any) -> Answer:
            match = tier.lookup_prefix(tenant, hashes, cache_salt=salt, timeout_s=remaining)
            lease = match.lease
            if lease is None:
                return int(match.matched_blocks), None
            if not match.matched_blocks:
                self._link.release(tier, lease.lease_id)
                return 0, None
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
            return int(match.matched_blocks), held

        return self._link.call("prefix lookup", lookup) or (0, None)
