"""The scheduler half's measurements and load decisions (the model itself: cost.py).

- Prefill speed: build_connector_meta files each step (a step id travels to the worker
  in the metadata) with the prompt tokens it computes and its longest context; the
  worker's stats for that step come back with its output (update_connector_output),
  carrying the seconds it spent loading and saving. The step's compute time is from
  the later of its planning and the previous step's output, to its own output, less
  those seconds; steps that are mostly prefill (<= 1/8 other tokens) and computed at
  least a block are samples.
- Pool speed: the worker's loads of each step (bytes, seconds).
- Warm speed: promoting lookups (probes.py) report promoted bytes and their time.

Thread-safe: warm samples arrive on the probes' threads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infercache_client.vllm.cost import Decision, LoadCostModel, Reason, Tier

STEPS = "steps"
"""Key of the worker's stats: (step id, load bytes, load s, save s) per executed step."""
MAX_PENDING_STEPS = 64
"""Planned steps remembered while their outputs are due (async scheduling runs ahead)."""


@dataclass(frozen=True, slots=True)
class _Step:
    step_id: int
    planned_at: float
    prefill_tokens: int
    context_tokens: int


class LoadGauge:
    """Feeds the cost model and asks it; counts what it decided."""

    def __init__(
        self,
        model: LoadCostModel,
        *,
        block_bytes: int,
        block_size: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`block_bytes`: bytes of one block of this layout (all layers, K and V)."""
        self.model = model
        self.block_bytes = block_bytes
        self._block_size = block_size
        self._clock = clock
        self._lock = threading.Lock()
        self._steps: deque[_Step] = deque(maxlen=MAX_PENDING_STEPS)
        self._next_step = 0
        self._last_output = 0.0
        self.counts: dict[str, int] = {}
        """Counters since the last take_counts() (stats.COUNTERS names)."""
        self.totals: dict[str, int] = {}
        """Counters since the start."""

    # -- prefill ---------------------------------------------------------------------------

    def plan_step(self, prefill_tokens: int, other_tokens: int, context_tokens: int) -> int:
        """A step was planned; its id (sent to the worker in the metadata)."""
        with self._lock:
            step_id = self._next_step
            self._next_step += 1
            mostly_prefill = prefill_tokens >= self._block_size and other_tokens * 8 <= (
                prefill_tokens
            )
            if mostly_prefill:
                self._steps.append(_Step(step_id, self._clock(), prefill_tokens, context_tokens))
            return step_id

    def step_outputs(self, worker_stats: Mapping[str, Any] | None) -> None:
        """A step's output came back with the worker's stats (None: no connector output)."""
        now = self._clock()
        steps = list(worker_stats.get(STEPS, ())) if worker_stats else []
        with self._lock:
            started_after = self._last_output
            self._last_output = now
            for step_id, load_bytes, load_s, save_s in steps:
                self.model.observe_load(Tier.POOL, int(load_bytes), float(load_s))
                planned = self._pop(int(step_id))
                if planned is None:
                    continue
                compute = now - max(planned.planned_at, started_after) - load_s - save_s
                self.model.observe_prefill(planned.prefill_tokens, planned.context_tokens, compute)

    def _pop(self, step_id: int) -> _Step | None:
        while self._steps and self._steps[0].step_id < step_id:
            self._steps.popleft()  # no output came for it (an empty step)
        if self._steps and self._steps[0].step_id == step_id:
            return self._steps.popleft()
        return None

    # -- decisions -------------------------------------------------------------------------

    def wait_on_warm(self, blocks: int, context_tokens: int) -> Decision:
        """Should a lookup of `blocks` beyond the local prefix wait for the warm tier?"""
        with self._lock:
            return self.model.decide(
                Tier.WARM, blocks * self.block_bytes, blocks * self._block_size, context_tokens
            )

    def load_pool(self, blocks: int, context_tokens: int) -> bool:
        """Load `blocks` matched in the pool (counted when it is skipped)?"""
        with self._lock:
            decision = self.model.decide(
                Tier.POOL, blocks * self.block_bytes, blocks * self._block_size, context_tokens
            )
            if not decision.load:
                self._count("kv_load_skipped_slower_than_recompute")
            return decision.load

    def warm_sample(
        self, promoted: int, retry_later: bool, seconds: float, reason: Reason | None
    ) -> None:
        """A promoting lookup answered: `promoted` blocks in `seconds`; `retry_later`: the
        warm tier held more it did not bring within the sidecar's bound. `reason`: why
        the request it was taken for did not wait for the warm tier (None: it did)."""
        with self._lock:
            if promoted > 0:
                self.model.observe_load(Tier.WARM, promoted * self.block_bytes, seconds)
            elif retry_later:
                # Not one block within the sidecar's bound: one block in that time is
                # an upper bound on the tier's speed.
                self.model.observe_load(Tier.WARM, self.block_bytes, seconds)
            if (promoted > 0 or retry_later) and reason is Reason.SLOWER:
                self._count("kv_load_skipped_slower_than_recompute")

    def _count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n
        self.totals[name] = self.totals.get(name, 0) + n

    def take_counts(self) -> dict[str, int]:
        """The counters since the last call."""
        with self._lock:
            counts, self.counts = self.counts, {}
            return counts
