"""Prefix probes off vLLM's engine loop.

get_num_new_matched_tokens runs on the engine loop, between forward passes of every
running request. A probe (one LookupPrefix, deadline lookup_timeout_s) runs on a small
thread pool; the scheduler waits for it at most INLINE_WAIT_S, which a healthy sidecar
answers within. A probe still running then is left to finish in the background: the
scheduler tells vLLM "not known yet" (None), vLLM keeps stepping the other requests and
asks again next step, and the request is scheduled once its probe answered, at most
lookup_timeout_s after it was asked. A frozen sidecar thus delays each new request by
at most lookup_timeout_s and pauses the running ones by at most INLINE_WAIT_S.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from infercache_client.vllm.link import SidecarLink

INLINE_WAIT_S = 0.02
"""The most the engine loop waits for a probe before asking vLLM to come back."""
WORKERS = 4
"""Probes in flight at once (more wait in the pool's queue, within their own deadline)."""


@dataclass(frozen=True, slots=True)
class _Probe:
    future: Future[int]
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

    def take(self, req_id: str, wait_s: float) -> tuple[int, list[bytes]] | None:
        """(matched blocks, the chain) once the probe answered (waiting up to `wait_s`),
        else None. A failed probe answers 0."""
        probe = self._running[req_id]
        try:
            matched = probe.future.result(timeout=wait_s)
        except FutureTimeout:
            return None
        except CancelledError:  # closed under it (engine shutdown): a miss
            matched = 0
        del self._running[req_id]
        return matched, probe.hashes

    def forget(self, req_id: str) -> None:
        """The request is gone: its probe's answer is not wanted (its lease is released)."""
        self._running.pop(req_id, None)

    def close(self) -> None:
        """Stop taking probes (those in flight end within their deadline)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _probe(self, hashes: list[bytes], salt: str, deadline: float) -> int:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 0  # queued behind slow probes past its own bound: a miss
        tenant = self._tenant

        def lookup(tier: Any) -> int:
            match = tier.lookup_prefix(tenant, hashes, cache_salt=salt, timeout_s=remaining)
            # Nothing stays pinned: vLLM may ask again, or never schedule the request.
            if match.lease is not None:
                self._link.release(tier, match.lease.lease_id)
            return int(match.matched_blocks)

        return self._link.call("prefix lookup", lookup) or 0
