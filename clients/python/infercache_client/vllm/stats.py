"""The connector's counters and timings, through vLLM's KVConnectorStats.

Both halves report here: the worker's per-step timings (which step ran, its loads'
bytes and seconds, its saves' time on the forward pass) travel to the scheduler half
with the step's output (KVConnectorOutput.kv_connector_stats), where the cost model
reads them (gauge.py); the scheduler half adds its decisions' counters. vLLM sums
them over each logging interval ("KV Transfer metrics: ..." in its log) and, through
build_prom_metrics, exports the counters on /metrics as
`vllm:infercache_<counter>_total` (the decision is the engine's, not the sidecar's: it
is counted where it is made).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

from infercache_client.vllm.gauge import STEPS

COUNTERS = (
    "kv_load_skipped_slower_than_recompute",
    "kv_loaded_blocks",
    "kv_saved_blocks",
)
"""Summed over an interval and exported as Prometheus counters."""
TIMINGS = ("load_s", "load_bytes", "save_critical_s", "save_background_s")
"""Worker timings, summed over an interval (logged, not exported)."""

DOCS = {
    "kv_load_skipped_slower_than_recompute": (
        "Requests the connector recomputed because loading the blocks a tier held was "
        "predicted slower than recomputing them"
    ),
    "kv_loaded_blocks": "KV blocks loaded from the sidecar's pool into vLLM's cache",
    "kv_saved_blocks": "KV blocks saved into the sidecar's pool",
}


@dataclass
class InfercacheStats(KVConnectorStats):
    """Counters (COUNTERS, TIMINGS: numbers) and the worker's STEPS (a list)."""

    def reset(self) -> None:
        """Empty it."""
        self.data: dict[str, Any] = {}

    def add(self, name: str, value: float) -> None:
        """Add to a counter or timing."""
        self.data[name] = self.data.get(name, 0) + value

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        """Sum counters, concatenate steps."""
        for name, value in other.data.items():
            if name == STEPS:
                self.data[STEPS] = [*self.data.get(STEPS, []), *value]
            else:
                self.add(name, value)
        return self

    def reduce(self) -> dict[str, int | float]:
        """What vLLM logs for the interval."""
        return {k: round(v, 6) for k, v in self.data.items() if k != STEPS}

    def is_empty(self) -> bool:
        """Nothing counted (vLLM then logs nothing)."""
        return not any(self.data.values())


class InfercachePromMetrics(KVConnectorPromMetrics):
    """The COUNTERS as `vllm:infercache_<name>_total`, per engine."""

    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[Any, Any],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        """Register one counter per name."""
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {
            name: self._counter_cls(
                name=f"vllm:infercache_{name}", documentation=DOCS[name], labelnames=labelnames
            )
            for name in COUNTERS
        }

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        """Add an interval's counts."""
        labels = self.per_engine_labelvalues[engine_idx]
        for name, counter in self._counters.items():
            value = transfer_stats_data.get(name, 0)
            if value:
                counter.labels(*labels).inc(value)
