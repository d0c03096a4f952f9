"""What the scheduler half tells the worker half each step (pickled between processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Copy pinned pool slots into vLLM blocks, pairwise."""

    req_id: str
    pool_id: str
    """The pool the slot ids belong to: a worker attached to another pool (the sidecar
    restarted in between) cannot read them and reports the blocks as failed."""
    block_ids: tuple[int, ...]
    slot_ids: tuple[int, ...]
    slot_generations: tuple[int, ...] = ()
    """Each slot's generation when pinned: a copy is checked against it (a slot reused
    under the copy, its pin lapsed, is a torn read: recomputed). () = nothing to check."""


@dataclass(frozen=True, slots=True)
class SaveSpec:
    """Copy vLLM blocks (complete after this step) into new slots and commit them."""

    req_id: str
    tenant: str
    cache_salt: str
    block_ids: tuple[int, ...]
    block_hashes: tuple[bytes, ...]
    stored: Any = None
    """The BlockStored event to publish once committed (events.py); None: events off."""


@dataclass
class InfercacheMetadata(KVConnectorMetadata):
    """One step's loads, saves and blocks the scheduler already knows cannot be loaded."""

    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    failed_block_ids: set[int] = field(default_factory=set)
    step: int = -1
    """The step's id: the worker reports its timings under it (gauge.py)."""
