"""How long a pod's sidecar is not yet serving because it is fingerprinting its model.

A sidecar started with --model-path opens no listener (data, admin, gateway, health)
before it knows the full content hash of the model's files: it never serves or stores
under a provisional identity, and a readiness probe keeps traffic away meanwhile. The
window is measured as the time from `infercache serve` to its data port accepting, minus
the same start without --model-path (the process start itself), medians of interleaved
starts: cold (page cache emptied, no memo), warm (files cached, no memo) and a restart
with the memo the previous start wrote.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from bench.fingerprint.methods import Evictor
from bench.harness.procs import ServerProc, sidecar_env
from tests.support.processes import free_port


def _start_s(model: Path | None, memo: Path) -> float:
    """Seconds from spawning a sidecar (embedded store, KV off) to its data port accepting."""
    port = free_port()
    argv = [sys.executable, "-m", "sidecar", "serve", "--listen", f"127.0.0.1:{port}"]
    argv += ["--admin-listen", "", "--metrics-listen", "", "--kv-enabled", "false"]
    argv += ["--log-level", "warning"]
    if model is not None:
        # Always a memo file of the bench's own: the default one may hold these shards.
        argv += ["--model-path", str(model), "--fingerprint-mode", "full"]
        argv += ["--fingerprint-cache-file", str(memo)]
    proc = ServerProc("sidecar", argv, (port,), env=sidecar_env())
    started = time.perf_counter()
    proc.spawn()
    try:
        proc.wait_ready(timeout_s=600)
        return time.perf_counter() - started
    finally:
        proc.stop()


def startup_window(base: Path, scratch: Path, evictor: Evictor, rounds: int) -> dict[str, str]:
    """key=value pairs: the window in ms, cold, warm and with a memo (each a median of
    `rounds` interleaved starts), and the bare process start it is measured against."""
    samples: dict[str, list[float]] = {"bare": [], "cold": [], "warm": [], "memo": []}
    cold_how = "n/a"
    for r in range(rounds):
        memo = scratch / f"memo-{r}.json"
        samples["bare"].append(_start_s(None, memo))
        if evictor.evict(base):
            cold_how = evictor.how
            samples["cold"].append(_start_s(base, scratch / f"memo-cold-{r}.json"))
        samples["warm"].append(_start_s(base, memo))  # writes the memo ...
        samples["memo"].append(_start_s(base, memo))  # ... this restart reads
    bare = statistics.median(samples["bare"])

    def window(case: str) -> str:
        if not samples[case]:
            return "n/a"
        return f"{max(0.0, statistics.median(samples[case]) - bare) * 1e3:.0f}"

    return {
        "start_bare_ms": f"{bare * 1e3:.0f}",
        "window_cold_ms": window("cold"),
        "window_warm_ms": window("warm"),
        "window_memo_ms": window("memo"),
        "window_cold_via": cold_how,
    }
