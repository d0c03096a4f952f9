"""Every op the invalidation benchmark's client worker runs (both halves)."""

from __future__ import annotations

from bench.harness.workers import Op
from bench.invalidate import freshness_ops, latency_ops

OPS: dict[str, Op] = {**latency_ops.OPS, **freshness_ops.OPS}
