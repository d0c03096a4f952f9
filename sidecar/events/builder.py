"""vLLM KV events of what the sidecar holds, built from the hot tier's block changes.

Pure: no socket, no clock, no encoder. `EventBuilder` is the hot tier's BlockEvents
(kv/block_events.py): it records each change in order, and `take` turns the record
into events, one per run of consecutive changes of one kind, tier and version:

    pool_stored   BlockStored   medium "CPU", ownership "infercache-pool", LOCAL
    pool_removed  BlockRemoved  same tier
    warm_stored   BlockStored   medium "STORAGE", ownership "infercache-warm", REMOTE
    warm_dropped  BlockRemoved  the warm tier's blocks this sidecar demoted, of a version

`wire` gives an event as vLLM's msgspec encoder lays it out (a map tagged with the
class name, fields in declaration order, defaults omitted; the batch an array), so
any msgpack encoder produces the bytes vLLM's `KVEventBatch` decoder reads. A block's
hash is the connector's for the same block (router_hash.event_hash of the stored
key), computed in `wire`, i.e. on the publisher's thread, not on the event loop.
"""

from __future__ import annotations

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
)
from infercache_client.vllm.router_hash import event_hash

from sidecar.kv.layout import BlockKey


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
    extra: tuple[tuple[str, str], ...]

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
            "extra_keys": [list(map(list, self.extra))] * len(self.keys),
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
_POOL_STORED, _POOL_REMOVED, _WARM_STORED, _WARM_DROPPED = range(4)


class EventBuilder:
    """Records the hot tier's block changes; `take` gives them as events, in order."""

    def __init__(self) -> None:
        self._versions: dict[Hashable, _Version] = {}
        self._record: list[tuple[int, Hashable, list[BlockKey]]] = []
        """Runs of changes: (kind, version, keys), consecutive changes of one kind and
        version in one run."""
        self._demoted: dict[str, dict[BlockKey, None]] = {}
        """Per version, the keys this sidecar wrote to the warm tier (removed on drop)."""

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

    def pool_stored(self, key: BlockKey, version: Hashable) -> None:
        """A block published in the pool."""
        self._add(_POOL_STORED, version, key)

    def pool_removed(self, key: BlockKey) -> None:
        """A block the pool forgot."""
        self._add(_POOL_REMOVED, None, key)

    def warm_stored(self, keys: Sequence[BlockKey], version: str) -> None:
        """Blocks this sidecar demoted to the warm tier."""
        demoted = self._demoted.setdefault(version, {})
        for key in keys:
            demoted[key] = None
            self._add(_WARM_STORED, version, key)

    def warm_dropped(self, version: str) -> None:
        """A version's warm values were deleted: those this sidecar demoted are gone."""
        keys = list(self._demoted.pop(version, ()))
        if keys:
            self._record.append((_WARM_DROPPED, version, keys))

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
            else:
                events.append(Removed(tuple(keys), WARM))
        return events

    def _stored(self, keys: tuple[BlockKey, ...], tier: Tier, version: Hashable) -> Stored:
        v = self._versions.get(version, _UNKNOWN)
        return Stored(keys, tier, v.block_size, (("schema", SCHEMA), ("model", v.fingerprint)))
