"""What never shares blocks: another cache_salt, other weights (a refused attach)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE
Outputs = dict[str, dict[str, list[int]]]


@pytest.fixture(scope="module")
def pod_sidecar(models: Models) -> Iterator[SidecarServer]:
    """A sidecar that knows its pod runs v1 (--model-path), embedded warm tier."""
    server = SidecarServer(model_path=models.v1)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def engine_v1(models: Models, pod_sidecar: SidecarServer) -> Iterator[EngineProcess]:
    engine = EngineProcess(models.v1, connector="infercache", extra={"sidecar": pod_sidecar.target})
    yield engine
    engine.close()


def cached(engine: EngineProcess, name: str, salt: str | None) -> tuple[int, list[int]]:
    (out,) = engine.generate([PROMPTS[name]], cache_salt=salt)
    return out["cached"], out["tokens"]


def test_requests_with_another_cache_salt_never_share_blocks(
    engine_v1: EngineProcess, reference: Outputs
) -> None:
    want = reference["v1"]["d"]
    assert cached(engine_v1, "d", "alice") == (0, want)
    assert cached(engine_v1, "d", "bob") == (0, want), "bob must not get alice's blocks"
    assert cached(engine_v1, "d", None) == (0, want), "nor an unsalted request"
    # Each salt reuses its own blocks (vLLM's own prefix cache is off: these are loads).
    assert cached(engine_v1, "d", "alice") == (LOADABLE, want)
    assert cached(engine_v1, "d", "bob") == (LOADABLE, want)
    assert cached(engine_v1, "d", None) == (LOADABLE, want)


def test_engine_on_other_weights_is_refused_and_serves_correct_answers(
    engine_v1: EngineProcess, pod_sidecar: SidecarServer, models: Models, reference: Outputs
) -> None:
    """The sidecar fingerprints its pod's weights (v1); an engine that loaded v2 declares
    v2's fingerprint, is refused (FAILED_PRECONDITION) and serves without the cache."""
    assert cached(engine_v1, "e", None)[0] == 0
    assert cached(engine_v1, "e", None) == (LOADABLE, reference["v1"]["e"])  # v1 blocks exist
    engine = EngineProcess(models.v2, connector="infercache", extra={"sidecar": pod_sidecar.target})
    try:
        for _ in range(2):
            assert cached(engine, "e", None) == (0, reference["v2"]["e"])
        stats = engine.stats()
    finally:
        engine.close()
    assert stats["scheduler_attaches"] == 0
    assert stats["scheduler_failures"] >= 1
    assert stats["loaded_blocks"] == 0
    assert stats["saved_blocks"] == 0
