"""The worker's saves, with only the copy on the forward pass.

A save is allocate, copy, commit, release. vLLM's blocks are only certain to hold the
step's KV between the end of its forward pass and the next step (a preempted request's
blocks are freed and reused at once), so the copy out of them stays in wait_for_save.
Everything else moves off the forward pass:

- allocate runs on a background thread from the moment vLLM binds the step's metadata
  (before the forward pass), so the slots are usually there when the copy starts, and
  mapped into this process (kv/prefault.py: the copy then does not fault page by page);
- commit and release run on the same background thread after the copy: the slots are
  leased to this worker and unpublished until the commit, which the sidecar seals over
  what they hold then, so a save is never visible half-written; a commit that fails or
  is late is a later miss.

One thread, in order: a step's commits are sent before the next step's allocations.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import torch

from infercache_client.vllm.link import SidecarLink
from infercache_client.vllm.metadata import SaveSpec
from infercache_client.vllm.paged import PagedLayout, save_blocks

log = logging.getLogger("infercache_client.vllm")

CLOSE_WAIT_S = 5.0
"""How long shutdown waits for the commits in flight."""


class Saver:
    """Allocations ahead of the forward pass, copies on it, commits behind it."""

    def __init__(self, link: SidecarLink) -> None:
        """Saves go through `link`'s attachment (none: dropped)."""
        self._link = link
        self._layout: PagedLayout | None = None
        self._layers: list[torch.Tensor] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="infercache-save")
        self._allocs: dict[tuple[str, int], Future[tuple[Any, Any] | None]] = {}
        self._lock = threading.Lock()
        self._saved = 0
        self._taken = 0
        self._background_s = 0.0
        self._events: list[Any] = []
        self._settled = 0

    @property
    def saved_blocks(self) -> int:
        """Blocks committed so far."""
        with self._lock:
            return self._saved

    def bind(self, layout: PagedLayout, layers: list[torch.Tensor]) -> None:
        """vLLM's paged caches, once registered."""
        self._layout, self._layers = layout, layers

    def prepare(self, specs: Sequence[SaveSpec]) -> None:
        """Start allocating slots for `specs` (the step's saves) in the background."""
        for spec in specs:
            key = (spec.req_id, spec.block_ids[0])
            if key not in self._allocs:
                self._allocs[key] = self._thread.submit(self._allocate, len(spec.block_ids))

    def save(self, specs: Sequence[SaveSpec]) -> float:
        """Copy each spec's blocks into its slots and queue its commit; seconds spent."""
        started = time.perf_counter()
        for spec in specs:
            if not self._save(spec):
                self._settle(spec)
        return time.perf_counter() - started

    def drop(self, specs: Sequence[SaveSpec]) -> None:
        """Saves that will not be made (no caches bound yet): settled at once."""
        for spec in specs:
            self._settle(spec)

    def _save(self, spec: SaveSpec) -> bool:
        """Copy the spec's blocks; True when its commit is queued (it settles it)."""
        key = (spec.req_id, spec.block_ids[0])
        future = self._allocs.pop(key, None) or self._thread.submit(
            self._allocate, len(spec.block_ids)
        )
        try:
            # The allocation's own deadline (rpc_timeout_s) bounds this wait.
            allocated = future.result()
        except FutureTimeout:
            return False
        if allocated is None or self._layout is None:
            return False
        tier, alloc = allocated
        try:
            save_blocks(self._layout, self._layers, tier.pool, spec.block_ids, alloc.slot_ids)
        except Exception as exc:  # never commit slots whose copy did not complete
            log.warning("infercache: save of %d blocks failed: %s", len(spec.block_ids), exc)
            self._link.release(tier, alloc.lease.lease_id)
            return False
        self._thread.submit(self._commit, tier, alloc, spec)
        return True

    def _settle(self, spec: SaveSpec) -> None:
        # A save with an event ended, committed or not: the scheduler stops waiting for
        # it (events.py: the engine keeps stepping while saves it announced are open).
        if spec.stored is not None:
            with self._lock:
                self._settled += 1

    def _allocate(self, count: int) -> tuple[Any, Any] | None:
        allocated = self._link.call("allocate", lambda tier: (tier, tier.allocate(count)))
        if allocated is None:
            return None
        tier, alloc = allocated
        # Here, not in the copy: the slots' pages come into this process while the
        # forward pass runs (kv/prefault.py).
        if not tier.pool.prefault(alloc.slot_ids):
            log.warning("infercache: no memory for %d pool slots; not saved", count)
            self._link.release(tier, alloc.lease.lease_id)
            return None
        return tier, alloc

    def _commit(self, tier: Any, alloc: Any, spec: SaveSpec) -> None:
        started = time.perf_counter()

        def commit(current: Any) -> int | None:
            if current is not tier:
                return None  # re-attached meanwhile: the slots belonged to the old pool
            result = tier.commit(
                alloc.lease.lease_id,
                spec.tenant,
                alloc.slot_ids,
                spec.block_hashes,
                cache_salt=spec.cache_salt,
            )
            return int(result.committed_blocks)

        committed: int | None = None
        try:
            committed = self._link.call("commit", commit)
        finally:
            self._link.release(tier, alloc.lease.lease_id)
            with self._lock:
                self._saved += committed or 0
                self._background_s += time.perf_counter() - started
                if committed is not None and spec.stored is not None:
                    # Committed, or cached already: the pool holds every block of the spec.
                    self._events.append(spec.stored)
                if spec.stored is not None:
                    self._settled += 1

    def take_events(self) -> tuple[list[Any], int]:
        """BlockStored events of the saves committed since the last call, and how many
        saves with an event ended since then (committed or not)."""
        with self._lock:
            events, self._events = self._events, []
            settled, self._settled = self._settled, 0
            return events, settled

    def take_saved(self) -> int:
        """Blocks committed since the last call."""
        with self._lock:
            n, self._taken = self._saved - self._taken, self._saved
            return n

    def take_background_s(self) -> float:
        """Seconds spent committing since the last call."""
        with self._lock:
            s, self._background_s = self._background_s, 0.0
            return s

    def close(self) -> None:
        """Wait up to CLOSE_WAIT_S for the commits queued, then stop."""
        done = self._thread.submit(lambda: None)
        try:
            done.result(timeout=CLOSE_WAIT_S)
        except FutureTimeout:
            log.warning("infercache: commits still running at shutdown are dropped")
        self._thread.shutdown(wait=False, cancel_futures=True)
