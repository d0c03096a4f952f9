"""A sidecar that dies or stalls costs vLLM nothing but the reuse; reuse resumes after."""

from __future__ import annotations

import time

from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE
Outputs = dict[str, dict[str, list[int]]]
# Short back-off so the test does not wait long for the connector to try again.
RETRY_S = 0.5


def answer(engine: EngineProcess, name: str) -> tuple[int, list[int]]:
    (out,) = engine.generate([PROMPTS[name]])
    return out["cached"], out["tokens"]


def until_reused(engine: EngineProcess, name: str, attempts: int = 40) -> tuple[int, list[int]]:
    """Ask until `name` is loaded from the sidecar again (bounded; the connector retries
    after RETRY_S, and the first request after it attaches saves the blocks)."""
    for _ in range(attempts):
        got = answer(engine, name)
        if got[0]:
            return got
        time.sleep(RETRY_S / 2)
    return got


def test_sidecar_killed_or_frozen_mid_run_then_back(
    sidecar: SidecarServer, models: Models, reference: Outputs
) -> None:
    extra = {"sidecar": sidecar.target, "retry_s": RETRY_S, "lookup_timeout_s": 0.2}
    engine = EngineProcess(models.v1, connector="infercache", extra=extra)
    try:
        assert answer(engine, "f") == (0, reference["v1"]["f"])
        assert answer(engine, "f") == (LOADABLE, reference["v1"]["f"])

        sidecar.kill()
        for name in ("f", "g", "f"):
            assert answer(engine, name) == (0, reference["v1"][name]), "served without it"
        sidecar.start()  # same port, empty pool: the old attachment and pool are gone
        assert until_reused(engine, "g") == (LOADABLE, reference["v1"]["g"])

        # Alive but stalled: lookups hit their deadline, requests still complete.
        sidecar.freeze()
        try:
            for name in ("g", "h"):
                assert answer(engine, name) == (0, reference["v1"][name])
        finally:
            sidecar.thaw()
        assert until_reused(engine, "h") == (LOADABLE, reference["v1"]["h"])
        stats = engine.stats()
    finally:
        engine.close()
    assert stats["scheduler_attaches"] >= 2, stats
    assert stats["scheduler_failures"] >= 2, stats
    assert stats["torn_blocks"] == 0, "pinned slots are never reused under a load"
