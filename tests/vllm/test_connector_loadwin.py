"""Load only when it wins: a warm tier behind a slow link is not waited on, a fast one is.

The sidecar's Redis sits behind a throttling TCP proxy (tests/support/throttle.py). v1's
blocks reach Redis the way they do in a fleet: an engine of v1 saves them, an engine of
another version attaches and the sidecar demotes them (unthrottled); a fresh v1 engine
then finds them in the warm tier only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.processes import RedisServer
from tests.support.throttle import ThrottledProxy
from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE
BLOCKS = len(PROMPTS["a"]) // BLOCK_SIZE
SLOW_BPS = 64 << 10
"""The throttled link: 64 KiB/s, a 32 KiB block takes half a second (a prefill of the
test model's 128 tokens takes milliseconds)."""
OPEN_BOUND_MS = 2000
"""The sidecar's promotion bound on the open link (the slow half keeps the default 50 ms)."""
Outputs = dict[str, dict[str, list[int]]]


@pytest.fixture
def proxy(redis: RedisServer) -> Iterator[ThrottledProxy]:
    redis.flushall()
    link = ThrottledProxy(redis.port)
    yield link
    link.close()


@pytest.fixture
def warm_sidecar(proxy: ThrottledProxy) -> Iterator[SidecarServer]:
    """A sidecar whose Redis (its warm tier) is behind the proxy; no --model-path."""
    server = SidecarServer(redis_url=f"redis://127.0.0.1:{proxy.port}/0")
    server.start()
    yield server
    server.stop()


def answer(engine: EngineProcess, name: str) -> tuple[int, list[int]]:
    (out,) = engine.generate([PROMPTS[name]])
    return out["cached"], out["tokens"]


def stats_until(engine: EngineProcess, key: str, within_s: float = 10.0) -> dict[str, Any]:
    """The engine's connector stats once `key` is truthy (the warm samples run in the
    background), or as they are after `within_s`."""
    deadline = time.monotonic() + within_s
    stats = engine.stats()
    while not stats.get(key) and time.monotonic() < deadline:
        time.sleep(0.1)
        stats = engine.stats()
    return stats


def only_in_warm_tier(models: Models, redis: RedisServer, extra: dict[str, Any]) -> None:
    """v1's KV of prompts a, b, e and f saved, then demoted to Redis by a v2 attach."""
    engine = EngineProcess(models.v1, connector="infercache", extra=extra)
    try:
        engine.generate([PROMPTS[n] for n in "abef"])
    finally:
        engine.close()
    other = EngineProcess(models.v2, connector="infercache", extra=extra)
    try:
        deadline = time.monotonic() + 30
        while redis.dbsize() < 4 * BLOCKS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert redis.dbsize() >= 4 * BLOCKS, "v1's blocks were not demoted"
    finally:
        other.close()


def test_a_throttled_warm_tier_is_skipped_and_an_unthrottled_one_is_loaded(
    models: Models,
    reference: Outputs,
    redis: RedisServer,
    proxy: ThrottledProxy,
    warm_sidecar: SidecarServer,
) -> None:
    """Behind a 64 KiB/s link the connector recomputes (the skip counted, the answer the
    same as without any cache); on the open link (the sidecar restarted with a bound no
    promotion misses) it loads the same kind of prefix, and skips nothing."""
    extra = {"sidecar": warm_sidecar.target}
    only_in_warm_tier(models, redis, extra)

    proxy.rate = SLOW_BPS
    slow = EngineProcess(models.v1, connector="infercache", extra=extra)
    try:
        # Unmeasured: waited on within the sidecar's 50 ms bound, which nothing of
        # the link's 0.5 s per block meets: measured slow.
        assert answer(slow, "a") == (0, reference["v1"]["a"])
        stats_until(slow, "warm_measured")  # the probe's sample is filed off the loop
        assert answer(slow, "b") == (0, reference["v1"]["b"])
        stats = stats_until(slow, "kv_load_skipped_slower_than_recompute")
    finally:
        slow.close()
    assert stats.get("kv_load_skipped_slower_than_recompute", 0) >= 1, stats

    # The open link, and bounds a busy machine cannot miss: this half shows that an
    # unthrottled tier is loaded, not that a promotion beats 50 ms. On a 2-core CI VM a
    # promotion through the Python proxy beside an engine, a sidecar and Redis sometimes
    # took longer, and the request, not waiting past the bound by design, recomputed.
    proxy.rate = None
    warm_sidecar.kill()
    warm_sidecar.args = ["--kv-promote-timeout-ms", str(OPEN_BOUND_MS)]
    warm_sidecar.start()
    open_link = extra | {"lookup_timeout_s": 2 * OPEN_BOUND_MS / 1000}
    fast = EngineProcess(models.v1, connector="infercache", extra=open_link)
    try:
        assert answer(fast, "e") == (LOADABLE, reference["v1"]["e"])  # and measured
        measured = stats_until(fast, "warm_measured")
        assert answer(fast, "f") == (LOADABLE, reference["v1"]["f"]), (measured, fast.stats())
        stats = fast.stats()
    finally:
        fast.close()
    assert stats.get("kv_load_skipped_slower_than_recompute", 0) == 0, stats
