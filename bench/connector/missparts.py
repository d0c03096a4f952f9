"""Where a miss spends its time: the connector's calls, timed inside one engine.

    V/bin/python -m bench.connector.missparts --model DIR --sidecar HOST:PORT [--seed N]

Runs in the vllm venv (scripts/vllm_env.sh), against a running sidecar, with whatever
infercache_client is first on PYTHONPATH (so the connector before and after a change
can be timed alike). One engine with the connector answers `rounds` prompts nobody has
seen (misses: each looked up, computed, saved). Every connector hook vLLM calls is
wrapped with a timer, and so are the sidecar RPCs (HotTier.lookup_prefix, allocate,
commit, release), split by the thread they ran on: the engine's own thread is the
critical path, any other is background. Prints ms per miss for each.
"""

from __future__ import annotations

import argparse
import functools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from tests.support.vllm_engine import _transfer_config as transfer_config

SCHEDULER_HOOKS = (
    "on_new_request",
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "request_finished",
)
WORKER_HOOKS = ("bind_connector_metadata", "start_load_kv", "wait_for_save")
RPCS = ("lookup_prefix", "allocate", "commit", "release")

spent: dict[str, float] = defaultdict(float)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, adding its seconds to spent[name (+ ' (background)' off the main thread)]."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            where = "" if threading.current_thread() is threading.main_thread() else " (bg)"
            spent[name + where] += time.perf_counter() - started

    return wrapper


def instrument(llm: Any) -> None:
    """Wrap the two connector instances' hooks and the client's RPC methods."""
    from infercache_client.kv.client import HotTier
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector
    for name in SCHEDULER_HOOKS:
        if hasattr(scheduler, name):
            setattr(scheduler, name, timed(name, getattr(scheduler, name)))
    worker = get_kv_transfer_group()
    for name in WORKER_HOOKS:
        setattr(worker, name, timed(name, getattr(worker, name)))
    for name in RPCS:
        setattr(HotTier, name, timed("rpc " + name, getattr(HotTier, name)))


def ttft(llm: Any, prompt: list[int], seq: int) -> float:
    """Seconds from add_request to the first token (as bench/connector/engine.py)."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    started = time.perf_counter()
    engine.add_request(f"m-{seq}", {"prompt_token_ids": prompt}, SamplingParams(max_tokens=8))
    first = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if first is None and out.outputs and out.outputs[0].token_ids:
                first = time.perf_counter()
    assert first is not None
    return first - started


def main(argv: Sequence[str] | None = None) -> None:
    """Build the engine, run the misses, print the parts."""
    parser = argparse.ArgumentParser(prog="python -m bench.connector.missparts")
    parser.add_argument("--model", required=True)
    parser.add_argument("--sidecar", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix-tokens", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7, help="another per run: fresh prompts")
    args = parser.parse_args(argv)
    from vllm import LLM

    llm = LLM(
        model=args.model,
        enforce_eager=True,
        dtype="float32",
        max_model_len=2048,
        block_size=32,
        kv_cache_memory_bytes=512 << 20,
        enable_prefix_caching=True,
        kv_transfer_config=transfer_config(
            "infercache", {"sidecar": args.sidecar, "lookup_timeout_s": 5.0}
        ),
    )
    rng = random.Random(args.seed)
    for i in range(2):  # one-off costs
        ttft(llm, [rng.randrange(3, 500) for _ in range(64)], -1 - i)
    instrument(llm)
    ttfts = [
        ttft(llm, [rng.randrange(3, 500) for _ in range(args.prefix_tokens)], i)
        for i in range(args.rounds)
    ]
    time.sleep(1.0)  # background commits finish
    print(f"misses: {args.rounds}, ttft p50 {sorted(ttfts)[len(ttfts) // 2] * 1e3:.1f} ms")
    for name, seconds in sorted(spent.items()):
        print(f"  {name:<32} {seconds / args.rounds * 1e3:8.2f} ms per miss")


if __name__ == "__main__":
    main()
