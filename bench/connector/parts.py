"""Where a connector request's time goes, timed inside the engine process (--time-parts).

install() wraps, before vLLM builds its connector, the calls each part of the hit path
runs in: the prefix lookup as the engine loop waits for it (get_num_new_matched_tokens,
and how many times it answered "not known yet", each a scheduler step; lookup_rpc: the
probe itself, on its thread), the pin
(_pin), the copy from the pool into vLLM's paged cache (load_blocks; copy_runs counts
its runs of consecutive slots and blocks), the torn check after it, the save of new
prompt blocks (wait_for_save: waiting for the allocation, then the copy into the slots,
save_copy; the commit and release run behind it) and the end of the request (its pins
released). take() returns seconds per part summed since the last
take(), and clears. Wrapping costs about a microsecond per call, far below the parts'
milliseconds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

_SPENT: dict[str, float] = {}
_COUNTS: dict[str, int] = {}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        finally:
            _SPENT[name] = _SPENT.get(name, 0.0) + time.perf_counter() - started
        if name == "lookup" and out is None:
            _COUNTS["lookup_not_known_yet"] = _COUNTS.get("lookup_not_known_yet", 0) + 1
        if name == "runs":
            _COUNTS["copy_runs"] = _COUNTS.get("copy_runs", 0) + len(out)
        return out

    return timed


def install() -> None:
    """Wrap the connector's parts (call before the engine is built)."""
    from infercache_client.kv.client import HotTier
    from infercache_client.vllm import paged, probes, saves, scheduler, worker

    targets: list[tuple[str, Any, str]] = [
        ("lookup", scheduler.SchedulerSide, "get_num_new_matched_tokens"),
        ("lookup_rpc", probes.PrefixProbes, "_probe"),
        ("pin", scheduler.SchedulerSide, "_pin"),
        ("plan", scheduler.SchedulerSide, "build_connector_meta"),
        ("finish", scheduler.SchedulerSide, "request_finished"),
        ("load", worker.WorkerSide, "start_load_kv"),
        ("copy", worker, "load_blocks"),
        ("runs", paged, "runs"),
        ("torn_check", HotTier, "torn_blocks"),
        ("save", worker.WorkerSide, "wait_for_save"),
        ("save_copy", saves, "save_blocks"),
    ]
    for name, owner, attr in targets:
        if hasattr(owner, attr):  # an older connector may lack one (runs): not timed
            setattr(owner, attr, _timed(name, getattr(owner, attr)))


def take() -> dict[str, float]:
    """Seconds per part (and counts) since the last call; clears them."""
    out: dict[str, float] = {**_SPENT, **{k: float(v) for k, v in _COUNTS.items()}}
    _SPENT.clear()
    _COUNTS.clear()
    return out
