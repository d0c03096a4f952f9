"""The worker half: copies between vLLM's paged KV cache and the sidecar's pool.

Loads run in start_load_kv, before the forward pass reads the cache (all layers at
once: on the CPU pool a copy is a memcpy, there is no transfer to overlap). A save
is split so that only the copy is on the forward pass (saves.py): its slots are
allocated while the forward pass runs (when vLLM binds the step's metadata), the
blocks are copied into them in wait_for_save, after the forward pass wrote every
layer, and the commit and release run in the background (each RPC bounded by
rpc_timeout_s; the link never attaches on the forward pass, see link.py). The copy
is finished before the commit is sent, and uncommitted slots are never published, so
a save is never visible half-written. Each step's load and save times go back to the
scheduler half in the step's KVConnectorStats (stats.py), where the cost model uses
them. A block that cannot be loaded (its slots belong to a pool this
worker is not attached to, a copy failed, the scheduler could not pin it) is
reported by get_block_ids_with_load_errors and vLLM recomputes it; a save that fails
is dropped (a later miss, never a wrong hit: uncommitted slots are never published);
one that finds its attachment gone (the sidecar restarted) is dropped too, and the
link attaches again at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import torch

from infercache_client.vllm.gauge import STEPS
from infercache_client.vllm.link import SidecarLink
from infercache_client.vllm.metadata import InfercacheMetadata, LoadSpec
from infercache_client.vllm.paged import (
    PagedLayout,
    UnknownLayout,
    detect_layout,
    load_blocks,
)
from infercache_client.vllm.saves import Saver
from infercache_client.vllm.stats import InfercacheStats

log = logging.getLogger("infercache_client.vllm")


def _layer_index(name: str) -> int:
    """The layer number in a vLLM attention layer name ("model.layers.3.self_attn.attn")."""
    numbers = [int(part) for part in name.split(".") if part.isdigit()]
    if len(numbers) != 1:
        raise UnknownLayout(f"cannot tell the layer index of KV cache {name!r}")
    return numbers[0]


class WorkerSide:
    """State and copies of the worker-role connector."""

    def __init__(
        self,
        link: SidecarLink,
        *,
        num_layers: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        block_bytes: int,
    ) -> None:
        """Shape facts come from the same config the scheduler half attached with."""
        self._link = link
        self._block_bytes = block_bytes
        self._saver = Saver(link)
        self._stats = InfercacheStats()
        self._step_load_s = 0.0
        self._step_load_bytes = 0
        self._num_layers = num_layers
        self._block_size = block_size
        self._num_kv_heads = num_kv_heads
        self._head_dim = head_dim
        self._layers: list[torch.Tensor] = []
        self._layout: PagedLayout | None = None
        self._errors: set[int] = set()
        self.loaded_blocks = 0
        self.torn_blocks = 0

    @property
    def saved_blocks(self) -> int:
        """Blocks committed so far."""
        return self._saver.saved_blocks

    def register_kv_caches(self, kv_caches: Mapping[str, torch.Tensor]) -> None:
        """Keep the per-layer caches in layer order; unknown layouts disable the worker."""
        try:
            ordered = sorted(kv_caches.items(), key=lambda item: _layer_index(item[0]))
            if len(ordered) != self._num_layers:
                raise UnknownLayout(f"{len(ordered)} KV caches, the layout has {self._num_layers}")
            layouts = {
                detect_layout(
                    kv,
                    block_size=self._block_size,
                    num_kv_heads=self._num_kv_heads,
                    head_dim=self._head_dim,
                )
                for _, kv in ordered
            }
            if len(layouts) != 1:
                raise UnknownLayout("the layers' KV caches differ in layout")
        except UnknownLayout as exc:
            log.error("infercache: KV connector disabled: %s", exc)
            return
        self._layers = [kv for _, kv in ordered]
        self._layout = layouts.pop()
        self._saver.bind(self._layout, self._layers)

    def bind(self, meta: InfercacheMetadata) -> None:
        """The step's metadata, before its forward pass: allocate the saves' slots."""
        if self._layout is not None:
            self._saver.prepare(meta.saves)

    def start_load_kv(self, meta: InfercacheMetadata) -> None:
        """Copy this step's pinned slots into their blocks before the forward pass."""
        self._errors.update(meta.failed_block_ids)
        for spec in meta.loads:
            started = time.perf_counter()
            torn = self._load(spec)
            if torn is not None and len(torn) < len(spec.block_ids):
                self._step_load_s += time.perf_counter() - started
                self._step_load_bytes += len(spec.block_ids) * self._block_bytes
            if torn is None:
                self._errors.update(spec.block_ids)
            else:
                self._errors.update(spec.block_ids[i] for i in torn)

    def _load(self, spec: LoadSpec) -> tuple[int, ...] | None:
        """Copy one spec; None if nothing could be loaded, else the torn positions."""
        layout = self._layout
        tier = self._link.tier() if layout is not None else None
        if tier is None or layout is None:
            return None
        if tier.pool_id != spec.pool_id:
            # The scheduler half attached after a sidecar restart: this half follows, in
            # the background (the forward pass never waits for an attach); this load is
            # recomputed.
            log.info("infercache: slots of pool %s, not this worker's pool", spec.pool_id)
            self._link.reset(tier)
            return None
        try:
            load_blocks(layout, self._layers, tier.pool, spec.slot_ids, spec.block_ids)
        except Exception as exc:  # a bad slot id or a torn mapping: recompute
            log.warning("infercache: load of %d blocks failed: %s", len(spec.block_ids), exc)
            return None
        # Checked after the copy (the CPU copy is synchronous): a slot allocated again
        # meanwhile means its bytes may be another block's.
        torn = (
            tier.torn_blocks(spec.slot_ids, spec.slot_generations) if spec.slot_generations else ()
        )
        if torn:
            log.warning("infercache: %d torn blocks are recomputed", len(torn))
        self.loaded_blocks += len(spec.block_ids) - len(torn)
        self._stats.add("kv_loaded_blocks", len(spec.block_ids) - len(torn))
        self.torn_blocks += len(torn)
        return tuple(torn)

    def wait_for_save(self, meta: InfercacheMetadata) -> None:
        """Copy the blocks this step completed into their slots; commit in the background.
        Then file the step's timings."""
        save_s = 0.0
        if self._layout is not None:
            save_s = self._saver.save(meta.saves)
        else:
            self._saver.drop(meta.saves)
        entry = (meta.step, self._step_load_bytes, self._step_load_s, save_s)
        self._stats.data.setdefault(STEPS, []).append(entry)
        self._stats.add("load_s", self._step_load_s)
        self._stats.add("load_bytes", self._step_load_bytes)
        self._stats.add("save_critical_s", save_s)
        self._step_load_s, self._step_load_bytes = 0.0, 0

    def take_committed_events(self) -> tuple[list[Any], int]:
        """BlockStored events of the saves committed since the last call, and how many
        saves with an event ended since then (committed or not)."""
        return self._saver.take_events()

    def take_stats(self) -> InfercacheStats | None:
        """The steps' timings and counters since the last call (None: none)."""
        self._stats.add("kv_saved_blocks", self._saver.take_saved())
        self._stats.add("save_background_s", self._saver.take_background_s())
        if self._stats.is_empty():
            return None
        stats, self._stats = self._stats, InfercacheStats()
        return stats

    def close(self) -> None:
        """Let the background commits finish (bounded), then stop."""
        self._saver.close()

    def take_load_errors(self) -> set[int]:
        """Blocks that could not be loaded since the last call."""
        errors, self._errors = self._errors, set()
        return errors
