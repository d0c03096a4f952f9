"""The scheduler half: prefix lookups, pins, and what to load and save each step.

- get_num_new_matched_tokens asks the sidecar for the longest cached prefix; its lease
  is kept but not renewed (probes.Held: vLLM may ask again, or never schedule the
  request, so nothing stays pinned for long). The lookup runs off the engine loop
  (probes.py), started as soon as vLLM hands the request over (on_new_request): until it
  answers, vLLM is told to ask again (None). Whether it waits for the warm tier, and
  whether what it found is loaded at all, the cost model decides (gauge.py, cost.py).
- update_state_after_alloc pins the promised blocks: it takes over the probe's lease
  (probes.Held) when it is young and of the current attachment, else looks up again;
  any block the sidecar no longer has (evicted, sidecar gone) is sent to the worker as
  failed, which reports it through get_block_ids_with_load_errors and vLLM recomputes
  from there. A hold nobody takes over is released.
- build_connector_meta hands the worker the loads and the prompt blocks that this step
  completes (saved once each); request_finished releases the pins.

No call here waits longer than lookup_timeout_s for the sidecar (the pin; the probe's
wait is shorter, releases and attaches never wait): while the link has no attachment
(backing off, or attaching in the background) requests see 0 external tokens at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.events import ConnectorEvents
from infercache_client.vllm.gauge import STEPS, LoadGauge
from infercache_client.vllm.identity import AdapterFingerprints
from infercache_client.vllm.inflight import InFlightSaves
from infercache_client.vllm.link import SidecarLink
from infercache_client.vllm.metadata import InfercacheMetadata, LoadSpec, SaveSpec
from infercache_client.vllm.probes import INLINE_WAIT_S, Held, PrefixProbes

log = logging.getLogger("infercache_client.vllm")


@dataclass
class _Request:
    """What the scheduler half remembers about one running request."""

    prompt: list[int]
    hashes: list[bytes]
    cache_salt: str
    block_ids: list[int] = field(default_factory=list)
    saved_blocks: int = 0
    """Leading prompt blocks already in the sidecar (loaded from it, or saved)."""
    lease: tuple[Any, str] | None = None
    """(HotTier, lease id) pinning the loaded blocks until the request finishes."""


@dataclass(frozen=True, slots=True)
class _Match:
    hashes: list[bytes]
    local_blocks: int
    matched_blocks: int
    held: Held | None = None


class SchedulerSide:
    """State and sidecar calls of the scheduler-role connector."""

    def __init__(
        self,
        link: SidecarLink,
        *,
        tenant: str,
        block_size: int,
        adapters: AdapterFingerprints,
        lookup_timeout_s: float,
        gauge: LoadGauge,
        events: ConnectorEvents | None = None,
    ) -> None:
        """`link` is attached lazily; `tenant` scopes every block; `lookup_timeout_s`
        bounds a probe from the moment vLLM first asks; `gauge` decides what is loaded;
        `events`: KV events on."""
        self._link = link
        self.gauge = gauge
        self.events = events
        self._in_flight = InFlightSaves()
        self._probes = PrefixProbes(
            link, gauge, tenant=tenant, timeout_s=lookup_timeout_s, in_flight=self._in_flight
        )
        self._tenant = tenant
        self._block_size = block_size
        self._adapters = adapters
        self._matches: dict[str, _Match] = {}
        self._requests: dict[str, _Request] = {}
        self._loads: list[LoadSpec] = []
        self._failed: set[int] = set()
        self._cached: dict[str, int] = {}
        """Blocks the pool holds of a request that recomputes them (not saved again)."""
        self.lookups = 0
        self.matched_tokens = 0
        self.pins_taken_over = 0
        """Pins that took over the probe's lease instead of looking up again."""

    def _chain(self, request: Any) -> tuple[list[bytes], str] | None:
        """The request's block hashes over its prompt, or None when it must not be cached."""
        prompt = request.prompt_token_ids
        if not prompt or getattr(request, "prompt_embeds", None) is not None:
            return None
        if getattr(request, "mm_features", None):
            return None  # image/audio inputs are not in the token ids: never shared
        salt = request.cache_salt or ""
        lora = request.lora_request
        scope = ChainScope(cache_salt=salt)
        if lora is not None:
            adapter = self._adapters.of(lora.lora_path) if lora.lora_path else None
            if adapter is None:
                return None  # an adapter we cannot identify: any doubt = different
            scope = ChainScope(lora.lora_name, adapter, salt)
        tier = self._link.tier()
        limit = tier.max_chain_blocks if tier is not None else 0
        return request_chain(prompt, self._block_size, scope, limit), salt

    def on_new_request(self, request: Any) -> None:
        """Start the request's probe now: it runs while vLLM finishes other work."""
        self._start_probe(request, 0)

    def _start_probe(self, request: Any, num_computed_tokens: int) -> bool:
        """Start a probe unless nothing beyond `num_computed_tokens` could be loaded."""
        chain = self._chain(request)
        if chain is None:
            return False
        hashes, salt = chain
        # The last prompt token is always computed (its logits sample the next token).
        usable = min(len(hashes), (len(request.prompt_token_ids) - 1) // self._block_size)
        local = num_computed_tokens // self._block_size
        if usable <= local:
            return False
        warm = self.gauge.wait_on_warm(usable - local, usable * self._block_size)
        skip_warm = None if warm.load else warm.reason
        self._probes.start(request.request_id, hashes, salt, usable, skip_warm)
        return True

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> int | None:
        """External tokens beyond `num_computed_tokens` the sidecar holds (pinned only by
        the probe's unrenewed lease), or None while the lookup has not answered (vLLM asks
        again next step)."""
        req_id = request.request_id
        self._drop(self._matches.pop(req_id, None))
        if not self._probes.running(req_id) and not self._start_probe(request, num_computed_tokens):
            return 0
        taken = self._probes.take(req_id, INLINE_WAIT_S)
        if taken is None:
            return None
        answer, hashes = taken
        matched, held = answer.matched, answer.held
        self.lookups += 1
        if self.events is not None and matched > 0:
            self._track(request)
            self.events.found(req_id, hashes, matched, request.prompt_token_ids)
        local = num_computed_tokens // self._block_size
        if matched <= local:
            self._probes.drop(held)
            return 0
        if not self.gauge.load_pool(matched - local, matched * self._block_size):
            self._probes.drop(held)
            self._cached[req_id] = matched  # recomputed, but the pool has them already
            return 0
        self._matches[req_id] = _Match(hashes, local, matched, held)
        external = matched * self._block_size - num_computed_tokens
        self.matched_tokens += external
        return external

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """Pin the promised blocks and plan their load; start tracking the request."""
        req_id = request.request_id
        match = self._matches.pop(req_id, None)
        block_ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        state = self._requests.get(req_id)
        if state is None:
            chain = (match.hashes, request.cache_salt or "") if match else self._chain(request)
            if chain is None:
                return  # never cached: nothing to load or save
            hashes, salt = chain
            state = _Request(list(request.prompt_token_ids), hashes, salt)
            local = request.num_computed_tokens // self._block_size
            state.saved_blocks = max(local, self._cached.pop(req_id, 0))
            self._requests[req_id] = state
            self._track(request)
        state.block_ids = block_ids
        if num_external_tokens <= 0 or match is None:
            self._drop(match)
            return
        first = match.local_blocks
        count = num_external_tokens // self._block_size
        wanted = block_ids[first : first + count]
        self._pin(req_id, state, match.hashes[: first + count], first, wanted, match.held)
        state.saved_blocks = max(state.saved_blocks, first + count)

    def _pin(
        self,
        req_id: str,
        state: _Request,
        hashes: list[bytes],
        first: int,
        wanted: list[int],
        held: Held | None,
    ) -> None:
        tenant, salt = self._tenant, state.cache_salt
        self._unpin(state)  # a preempted request allocates (and pins) again

        def pin(tier: Any) -> tuple[Any, list[int], list[int], str]:
            match = tier.lookup_prefix(tenant, hashes, cache_salt=salt)
            lease = match.lease.lease_id if match.lease is not None else ""
            return tier, list(match.slot_ids), list(match.slot_generations), lease

        pinned = self._take_over(held, len(hashes))
        if pinned is None:
            self._probes.drop(held)
            pinned = self._link.call("pin", pin)
        if pinned is None:
            self._failed.update(wanted)
            return
        tier, slots, generations, lease_id = pinned
        pool_id = tier.pool_id
        if lease_id:
            state.lease = (tier, lease_id)
        got = slots[first : first + len(wanted)]
        gens = tuple(generations[first : first + len(wanted)]) if generations else ()
        loadable = len(got)
        if loadable:
            spec = LoadSpec(req_id, pool_id, tuple(wanted[:loadable]), tuple(got), gens)
            self._loads.append(spec)
        if loadable < len(wanted):
            log.info("infercache: %d promised blocks gone before pinning", len(wanted) - loadable)
            self._failed.update(wanted[loadable:])

    def _take_over(
        self, held: Held | None, blocks: int
    ) -> tuple[Any, list[int], list[int], str] | None:
        """The probe's pinned blocks as the request's pin (no second lookup), renewed from
        now on; None when there is no usable hold."""
        if held is None or not held.usable(self._link.tier(), blocks, time.monotonic()):
            return None
        if held.tier.renewer is not None:
            held.tier.renewer.track(held.lease_id, held.ttl_ms)
        self.pins_taken_over += 1
        slots, generations = list(held.slot_ids), list(held.slot_generations)
        return held.tier, slots, generations, held.lease_id

    def _drop(self, match: _Match | None) -> None:
        if match is not None:
            self._probes.drop(match.held)

    def build_connector_meta(self, scheduler_output: Any) -> InfercacheMetadata:
        """This step's loads and saves (resets the pending loads)."""
        meta = InfercacheMetadata(self._loads, [], self._failed)
        self._loads, self._failed = [], set()
        scheduled = scheduler_output.num_scheduled_tokens
        prefill, context = 0, 0
        for new in scheduler_output.scheduled_new_reqs:
            state = self._requests.get(new.req_id)
            if state is not None:
                state.block_ids = list(new.block_ids[0])
                done = new.num_computed_tokens + scheduled.get(new.req_id, 0)
                self._plan_save(meta, new.req_id, state, done)
                computed = min(done, len(state.prompt)) - new.num_computed_tokens
                if computed > 0:
                    prefill, context = prefill + computed, max(context, done)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._requests.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and new_ids is not None:
                state.block_ids = list(new_ids[0])  # after preemption: the whole list
            elif new_ids is not None:
                state.block_ids.extend(new_ids[0])
            before = cached.num_computed_tokens[i]
            self._plan_save(meta, req_id, state, before + scheduled[req_id])
            computed = min(before + scheduled[req_id], len(state.prompt)) - before
            if computed > 0:
                prefill, context = prefill + computed, max(context, before + scheduled[req_id])
        total = int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0)
        meta.step = self.gauge.plan_step(prefill, max(0, total - prefill), context)
        return meta

    def step_output(self, connector_output: Any) -> None:
        """A step's output (KVConnectorOutput): the worker's timings feed the model."""
        stats = getattr(connector_output, "kv_connector_stats", None)
        data = getattr(stats, "data", None)
        self.gauge.step_outputs(data if isinstance(data, dict) and STEPS in data else None)

    def _plan_save(self, meta: InfercacheMetadata, req_id: str, state: _Request, done: int) -> None:
        """Save the prompt blocks this step completes (once each, while the sidecar is up)."""
        full = min(min(done, len(state.prompt)) // self._block_size, len(state.hashes))
        if full <= state.saved_blocks or self._link.tier() is None:
            return
        start = state.saved_blocks
        block_ids = state.block_ids[start:full]
        if len(block_ids) < full - start:
            return  # blocks not known yet (cannot happen with a consistent block table)
        self._in_flight.planned(state.hashes[start:full])
        meta.saves.append(
            SaveSpec(
                req_id,
                self._tenant,
                state.cache_salt,
                tuple(block_ids),
                tuple(state.hashes[start:full]),
                self.events.stored(req_id, state.hashes, start, full, state.prompt)
                if self.events is not None
                else None,
            )
        )
        state.saved_blocks = full

    def request_finished(self, request: Any) -> None:
        """Release the request's pins and forget it."""
        self._probes.forget(request.request_id)
        self._drop(self._matches.pop(request.request_id, None))
        self._cached.pop(request.request_id, None)
        state = self._requests.pop(request.request_id, None)
        if self.events is not None:
            self.events.forget(request.request_id)
        if state is not None:
            self._unpin(state)

    def _track(self, request: Any) -> None:
        """Give the events the request's salt and adapter (its chain's scope)."""
        if self.events is None or self.events.tracks(request.request_id):
            return
        lora = request.lora_request
        adapter = ("", "")
        if lora is not None:
            fingerprint = self._adapters.of(lora.lora_path) if lora.lora_path else None
            adapter = (lora.lora_name, fingerprint or "")
        self.events.track(request.request_id, request.cache_salt or "", adapter)

    def _unpin(self, state: _Request) -> None:
        if state.lease is not None:
            tier, lease_id = state.lease
            state.lease = None
            self._link.release(tier, lease_id)

    def close(self) -> None:
        """Stop the probes' threads."""
        self._probes.close()
