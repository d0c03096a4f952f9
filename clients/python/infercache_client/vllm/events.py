"""KV events for vLLM's event stream: the blocks this engine's infercache pool holds.

With `--kv-events-config` on, vLLM's scheduler publishes, each step, its own block
events and those its connector's `take_events` returns (vLLM's ZMQ publisher,
msgpack `KVEventBatch`). The connector reports:

- `BlockStored` (medium POOL_MEDIUM) for the blocks a save committed: the scheduler
  builds the event when it plans the save (it knows the tokens and the identity), the
  worker hands it back through `get_kv_connector_kv_cache_events` only once the
  commit succeeded, and vLLM brings it to the scheduler's `update_connector_output`;
  until every save it announced has come back (committed or not), the connector
  reports pending work, so vLLM keeps stepping without a request and the events of a
  request's last step are published at once, not at the next request;
- `BlockStored` for blocks a lookup found in the pool that this engine never reported
  (saved by another engine on the pod, or promoted from the warm tier).

Removals are the sidecar's to report (evictions, demotions after a weight change,
docs/kv-events.md): a lookup answering fewer blocks may only be a failed lookup.
Hashes are the published hashes of router_hash.py, 32 bytes, whatever
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES says (a 64-bit hash would let scopes collide).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from infercache.v1 import kv_pb2 as PB2
from vllm.distributed.kv_events import BlockStored, KVCacheEvent, KVConnectorKVEvents

from infercache_client.vllm.event_schema import (
    POOL_LOCALITY,
    POOL_MEDIUM,
    POOL_OWNER,
    SCHEMA,
    WARM_LOCALITY,
    WARM_OWNER,
    layout_label,
)
from infercache_client.vllm.router_hash import event_hashes, request_scope, tenant_salt_digest

REMEMBERED = 200_000
"""Published hashes remembered, so a lookup does not report a block twice (~20 MiB)."""
CONFIRM_S = 10.0
"""How long the engine keeps stepping for a save's commit to come back: longer than
its allocation and commit deadlines together (rpc_timeout_s each, 2 s by default)."""


@dataclass(frozen=True, slots=True)
class BlockScope:
    """Everything besides its tokens that a block's published hash covers."""

    scope_id: str
    """The attachment's version scope (weights, adapter slot, KV layout), hex."""
    model_fingerprint: str
    layout: str
    tenant: str
    cache_salt: str = ""
    lora_name: str = ""
    lora_fingerprint: str = ""

    def extra_keys(self) -> tuple[tuple[str, str], ...]:
        """What events carry per block: (name, value) pairs, the salt only as a digest."""
        return (
            ("schema", SCHEMA),
            ("model", self.model_fingerprint),
            ("layout", self.layout),
            ("scope", self.scope_id),
            ("tenant_salt", tenant_salt_digest(self.tenant, self.cache_salt)),
            ("lora", self.lora_name),
            ("adapter", self.lora_fingerprint),
        )

    def prefix(self) -> bytes:
        """The sidecar's scope prefix of these blocks' keys."""
        return request_scope(self.scope_id, self.tenant, self.cache_salt)


def stored_event(
    scope: BlockScope,
    chain: Sequence[bytes],
    start: int,
    end: int,
    token_ids: Sequence[int],
    block_size: int,
    medium: str = POOL_MEDIUM,
) -> BlockStored:
    """BlockStored for blocks [start, end) of a chain (its hashes from block 0)."""
    published = event_hashes(scope.prefix(), chain[max(start - 1, 0) : end])
    parent = published[0] if start > 0 else None
    hashes = published[1:] if start > 0 else published
    extra = scope.extra_keys()
    return BlockStored(
        block_hashes=list(hashes),
        parent_block_hash=parent,
        token_ids=list(token_ids[start * block_size : end * block_size]),
        block_size=block_size,
        lora_id=None,
        medium=medium,
        lora_name=scope.lora_name or None,
        extra_keys=[extra] * len(hashes),
        locality=POOL_LOCALITY if medium == POOL_MEDIUM else WARM_LOCALITY,
        ownership=POOL_OWNER if medium == POOL_MEDIUM else WARM_OWNER,
    )


def layout_name(layout: Any) -> str:
    """A short readable name of a KvLayout (the scope id covers all of it exactly)."""
    dtype = PB2.KvDtype.Name(layout.dtype).removeprefix("KV_DTYPE_").lower()
    return layout_label(
        layout.num_layers, layout.num_kv_heads, layout.head_dim, layout.tokens_per_block, dtype
    )


class InfercacheKVEvents(KVConnectorKVEvents):
    """The worker's committed-block events of one step, carried to the scheduler."""

    def __init__(self, events: list[KVCacheEvent] | None = None, settled: int = 0) -> None:
        """One worker's events (tensor parallelism is 1: nothing to agree on) and how many
        of its saves with an event ended in the step, committed or not."""
        self._events: list[KVCacheEvent] = list(events or [])
        self._workers = 1
        self.settled = settled

    def add_events(self, events: list[KVCacheEvent]) -> None:
        """Append events."""
        self._events.extend(events)

    def aggregate(self) -> InfercacheKVEvents:
        """One worker: nothing to aggregate."""
        return self

    def increment_workers(self, count: int = 1) -> None:
        """Count another worker's contribution."""
        self._workers += count

    def get_all_events(self) -> list[KVCacheEvent]:
        """Every event, in order."""
        return list(self._events)

    def get_number_of_workers(self) -> int:
        """Workers that contributed."""
        return self._workers

    def clear_events(self) -> None:
        """Drop every event."""
        self._events.clear()

    def __bool__(self) -> bool:
        return bool(self._events) or self.settled > 0


class ConnectorEvents:
    """Scheduler-side: scopes of live requests, events pending for `take_events`."""

    def __init__(
        self,
        *,
        model_fingerprint: str,
        layout: str,
        tenant: str,
        block_size: int,
        scope_id: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Identity shared by every block of this engine; `scope_id` reads the attachment's
        version scope (None while detached: nothing is published then)."""
        self._clock = clock
        self._awaiting: deque[float] = deque()
        self._block_size = block_size
        self._fingerprint = model_fingerprint
        self._layout = layout
        self._tenant = tenant
        self._scope_id = scope_id
        self._requests: dict[str, tuple[str, tuple[str, str]]] = {}
        self._pending: list[KVCacheEvent] = []
        self._published: OrderedDict[bytes, None] = OrderedDict()
        self.published_blocks = 0

    def tracks(self, req_id: str) -> bool:
        """Whether `track` was called for the request (and not `forget`)."""
        return req_id in self._requests

    def track(self, req_id: str, salt: str, lora: tuple[str, str]) -> None:
        """Remember a request's salt and adapter (name, fingerprint) until `forget`."""
        self._requests[req_id] = (salt, lora)

    def scope_of(self, req_id: str) -> BlockScope | None:
        """The request's block scope (None: not tracked, or detached)."""
        known = self._requests.get(req_id)
        scope_id = self._scope_id()
        if known is None or not scope_id:
            return None
        salt, (lora_name, lora_fingerprint) = known
        return BlockScope(
            scope_id,
            self._fingerprint,
            self._layout,
            self._tenant,
            salt,
            lora_name,
            lora_fingerprint,
        )

    def forget(self, req_id: str) -> None:
        """The request finished."""
        self._requests.pop(req_id, None)

    def stored(
        self, req_id: str, chain: Sequence[bytes], start: int, end: int, tokens: Sequence[int]
    ) -> BlockStored | None:
        """The event a save of blocks [start, end) publishes once committed (None: the
        request's scope is unknown, so nothing is published)."""
        scope = self.scope_of(req_id)
        if scope is None or end <= start:
            return None
        self._awaiting.append(self._clock())
        return stored_event(scope, chain, start, end, tokens, self._block_size)

    def settle(self, count: int) -> None:
        """`count` saves announced by `stored` ended (committed or not), oldest first
        (the worker commits in order, on one thread)."""
        for _ in range(min(count, len(self._awaiting))):
            self._awaiting.popleft()

    def awaiting(self) -> bool:
        """Whether a save announced by `stored` may still commit: its event is then
        still to come, and vLLM must keep stepping to carry it here (a save's commit
        runs after the step that planned it, often after the request's last step).
        A save not heard of within CONFIRM_S is given up (its worker went away)."""
        awaiting = self._awaiting
        if not awaiting:
            return False
        now = self._clock()
        while awaiting and now - awaiting[0] > CONFIRM_S:
            awaiting.popleft()
        return bool(awaiting)

    def found(
        self, req_id: str, chain: Sequence[bytes], matched: int, tokens: Sequence[int]
    ) -> None:
        """A lookup found the first `matched` blocks in the pool: report those not
        reported yet (from the first unreported one: a stored run has one parent)."""
        scope = self.scope_of(req_id)
        if scope is None or matched <= 0:
            return
        published = event_hashes(scope.prefix(), chain[:matched])
        first = next((i for i, h in enumerate(published) if h not in self._published), None)
        if first is not None:
            self.add([stored_event(scope, chain, first, matched, tokens, self._block_size)])

    def add(self, events: Iterable[KVCacheEvent]) -> None:
        """Events to publish at the next `take` (committed saves come back this way)."""
        for event in events:
            if isinstance(event, BlockStored):
                for h in event.block_hashes:
                    self._remember(h)
                self.published_blocks += len(event.block_hashes)
            self._pending.append(event)

    def take(self) -> list[KVCacheEvent]:
        """Everything pending, once."""
        events, self._pending = self._pending, []
        return events

    def _remember(self, h: Any) -> None:
        self._published[h] = None
        self._published.move_to_end(h)
        if len(self._published) > REMEMBERED:
            self._published.popitem(last=False)
