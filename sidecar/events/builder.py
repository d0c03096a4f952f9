"""vLLM KV events of what the sidecar holds, built from the hot tier's block changes.

Pure: no socket, no clock, no encoder. `EventBuilder` is the hot tier's BlockEvents
(kv/block_events.py): it records each change in order, and `take` turns the record
into events, one per run of consecutive changes of one kind, tier and version:

    pool_stored   BlockStored   medium "CPU", ownership "infercache-pool", LOCAL
    pool_removed  BlockRemoved  same tier
    warm_stored   BlockStored   medium "STORAGE", ownership "infercache-warm", REMOTE
    warm_dropped  BlockRemoved  the warm tier's blocks this sidecar demoted, of a version
    expire        BlockRemoved  demoted blocks whose warm-tier ttl has passed
    cleared       AllBlocksCleared  (a new publisher: what an earlier one said is void)

Each stored block's extra_keys name what scopes it: the schema, the weights'
fingerprint, and, once a lookup or commit named its request scope (`scope`), the KV
layout, the version scope and the tenant/salt digest, as the connector's events do.

`wire` gives an event as vLLM's msgspec encoder lays it out (a map tagged with the
class name, fields in declaration order, defaults omitted; the batch an array), so
any msgpack encoder produces the bytes vLLM's `KVEventBatch` decoder reads. A block's
hash is the connector's for the same block (router_hash.event_hash of the stored
key), computed in `wire`, i.e. on the publisher's thread, not on the event loop.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from infercache_client.vllm.event_schema import (
    POOL_LOCALITY,
    POOL_MEDIUM,
    POOL_OWNER,
    SCHEMA,
    WARM_LOCALITY,
    WARM_MEDIUM,
    WARM_OWNER,
    layout_label,
)
from infercache_client.vllm.router_hash import event_hash, tenant_salt_digest

from sidecar.kv.layout import SCOPE_BYTES, BlockKey, KvLayout

ExtraKeys = tuple[tuple[str, str], ...]
COMPACT_SLACK = 1024
"""Stale expiry entries tolerated beyond as many as there are live ones."""
MAX_SCOPES = 65_536
"""Request scopes whose names are remembered (the oldest is forgotten first: its blocks'
events then name the schema and the weights only)."""


@dataclass(frozen=True, slots=True)
class Tier:
    """Where a block lives, in vLLM's words."""

    medium: str
    ownership: str
    locality: str


POOL = Tier(POOL_MEDIUM, POOL_OWNER, POOL_LOCALITY)
WARM = Tier(WARM_MEDIUM, WARM_OWNER, WARM_LOCALITY)


@dataclass(frozen=True, slots=True)
class Stored:
    """Blocks a tier now holds. The sidecar knows their keys, not their tokens: no
    token ids, no parent (a router keys on the hash alone)."""

    keys: tuple[BlockKey, ...]
    tier: Tier
    block_size: int
    extras: tuple[ExtraKeys, ...]
    """One per key: what scopes the block."""

    def wire(self) -> dict[str, Any]:
        """vLLM's BlockStored as its encoder lays it out."""
        return {
            "type": "BlockStored",
            "block_hashes": [event_hash(k) for k in self.keys],
            "parent_block_hash": None,
            "token_ids": [],
            "block_size": self.block_size,
            "lora_id": None,
            "medium": self.tier.medium,
            "lora_name": None,
            "extra_keys": [[list(pair) for pair in extra] for extra in self.extras],
            "locality": self.tier.locality,
            "ownership": self.tier.ownership,
        }


@dataclass(frozen=True, slots=True)
class Removed:
    """Blocks a tier no longer holds."""

    keys: tuple[BlockKey, ...]
    tier: Tier

    def wire(self) -> dict[str, Any]:
        """vLLM's BlockRemoved as its encoder lays it out."""
        return {
            "type": "BlockRemoved",
            "block_hashes": [event_hash(k) for k in self.keys],
            "medium": self.tier.medium,
            "locality": self.tier.locality,
            "ownership": self.tier.ownership,
        }


@dataclass(frozen=True, slots=True)
class Cleared:
    """Every block this publisher reported is gone."""

    def wire(self) -> dict[str, Any]:
        """vLLM's AllBlocksCleared."""
        return {"type": "AllBlocksCleared"}


Event = Stored | Removed | Cleared


def batch_wire(ts: float, events: Sequence[Event], data_parallel_rank: int = 0) -> list[Any]:
    """vLLM's KVEventBatch (an array: ts, events, data_parallel_rank; vLLM's publisher
    fills the rank, 0 without data parallelism)."""
    return [ts, [e.wire() for e in events], data_parallel_rank]


@dataclass(frozen=True, slots=True)
class _Version:
    fingerprint: str
    block_size: int


_UNKNOWN = _Version("", 0)
# Change kinds of the record.
_POOL_STORED, _POOL_REMOVED, _WARM_STORED, _WARM_REMOVED, _CLEARED = range(5)


class EventBuilder:
    """Records the hot tier's block changes; `take` gives them as events, in order."""

    def __init__(self) -> None:
        self._versions: dict[Hashable, _Version] = {}
        self._scopes: OrderedDict[bytes, ExtraKeys] = OrderedDict()
        """Request scope prefix -> its extra_keys entries beyond schema and model."""
        self._record: list[tuple[int, Hashable, list[BlockKey]]] = []
        """Runs of changes: (kind, version, keys), consecutive changes of one kind and
        version in one run."""
        self._demoted: dict[str, dict[BlockKey, float]] = {}
        """Per version, the keys this sidecar wrote to the warm tier and when the tier
        lets them expire (removed on drop and on expiry)."""
        self._expiry: list[tuple[float, str, BlockKey]] = []
        """Heap of (expires at, version, key); entries a later write or a drop made stale
        are skipped, and the heap is rebuilt from `_demoted` when they outnumber the live
        ones (a version demoted again and again would otherwise grow it for a whole ttl)."""
        self._live = 0
        """Entries of `_demoted`, all versions."""

    def __bool__(self) -> bool:
        return bool(self._record)

    def _add(self, kind: int, version: Hashable, key: BlockKey) -> None:
        record = self._record
        if record and record[-1][0] == kind and record[-1][1] == version:
            record[-1][2].append(key)
        else:
            record.append((kind, version, [key]))

    def version(self, version: str, fingerprint: str, block_size: int) -> None:
        """Name a version's weights and block size (kv/block_events.py)."""
        self._versions[version] = _Version(fingerprint, block_size)

    def scope(
        self, prefix: bytes, scope: bytes, layout: KvLayout, tenant: str, cache_salt: str
    ) -> None:
        """Name a request scope (kv/block_events.py); the first naming is kept."""
        if prefix in self._scopes:
            return
        if len(self._scopes) >= MAX_SCOPES:
            self._scopes.popitem(last=False)
        self._scopes[prefix] = (
            (
                "layout",
                layout_label(
                    layout.num_layers,
                    layout.num_kv_heads,
                    layout.head_dim,
                    layout.tokens_per_block,
                    layout.dtype,
                ),
            ),
            ("scope", scope.hex()),
            ("tenant_salt", tenant_salt_digest(tenant, cache_salt)),
        )

    def pool_stored(self, key: BlockKey, version: Hashable) -> None:
        """A block published in the pool."""
        self._add(_POOL_STORED, version, key)

    def pool_removed(self, key: BlockKey) -> None:
        """A block the pool forgot."""
        self._add(_POOL_REMOVED, None, key)

    def warm_stored(self, keys: Sequence[BlockKey], version: str, expires_at: float) -> None:
        """Blocks this sidecar demoted to the warm tier, kept there until `expires_at`
        (the clock `expire` is given)."""
        demoted = self._demoted.setdefault(version, {})
        for key in keys:
            if key not in demoted:
                self._live += 1
            demoted[key] = expires_at
            heapq.heappush(self._expiry, (expires_at, version, key))
            self._add(_WARM_STORED, version, key)
        self._compact()

    def warm_dropped(self, version: str) -> None:
        """A version's warm values were deleted: those this sidecar demoted are gone."""
        keys = list(self._demoted.pop(version, ()))
        self._live -= len(keys)
        if keys:
            self._record.append((_WARM_REMOVED, version, keys))
        self._compact()

    def _compact(self) -> None:
        """Rebuild the expiry heap from the live entries once stale ones dominate it."""
        if len(self._expiry) <= 2 * self._live + COMPACT_SLACK:
            return
        self._expiry = [(at, v, k) for v, keys in self._demoted.items() for k, at in keys.items()]
        heapq.heapify(self._expiry)

    def next_expiry(self) -> float | None:
        """When the next demoted block's ttl passes (None: no block is due)."""
        return self._expiry[0][0] if self._expiry else None

    def expire(self, now: float) -> None:
        """Demoted blocks whose ttl passed by `now` are gone from the warm tier."""
        heap = self._expiry
        while heap and heap[0][0] <= now:
            at, version, key = heapq.heappop(heap)
            demoted = self._demoted.get(version)
            if demoted is None or demoted.get(key) != at:
                continue  # written again later, or dropped with its version
            del demoted[key]
            self._live -= 1
            if not demoted:
                del self._demoted[version]
            self._add(_WARM_REMOVED, version, key)

    def cleared(self) -> None:
        """Everything reported before is void (a new publisher starts with this)."""
        self._demoted.clear()
        self._expiry.clear()
        self._live = 0
        self._record.append((_CLEARED, None, []))

    def take(self) -> list[Event]:
        """The changes recorded since the last take, as events (one per run)."""
        record, self._record = self._record, []
        events: list[Event] = []
        for kind, version, keys in record:
            if kind == _POOL_STORED:
                events.append(self._stored(tuple(keys), POOL, version))
            elif kind == _POOL_REMOVED:
                events.append(Removed(tuple(keys), POOL))
            elif kind == _WARM_STORED:
                events.append(self._stored(tuple(keys), WARM, version))
            elif kind == _WARM_REMOVED:
                events.append(Removed(tuple(keys), WARM))
            else:
                events.append(Cleared())
        return events

    def _stored(self, keys: tuple[BlockKey, ...], tier: Tier, version: Hashable) -> Stored:
        v = self._versions.get(version, _UNKNOWN)
        base: ExtraKeys = (("schema", SCHEMA), ("model", v.fingerprint))
        scopes = self._scopes
        extras = tuple(base + scopes.get(k[:SCOPE_BYTES], ()) for k in keys)
        return Stored(keys, tier, v.block_size, extras)
