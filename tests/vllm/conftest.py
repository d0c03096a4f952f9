"""Fixtures of the vLLM connector tests: generated models, Redis, reference outputs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import RedisServer
from tests.support.vllm_engine import EngineProcess
from tests.support.vllm_model import PROMPTS, Models, write_model
from tests.support.vllm_sidecar import SidecarServer


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    root = tmp_path_factory.mktemp("models")
    write_model(root / "v1", 1)
    write_model(root / "v2", 2)
    return Models(root / "v1", root / "v2")


@pytest.fixture
def served_dir(models: Models, tmp_path: Path) -> Path:
    """A model directory holding v1, whose weights a test may replace in place."""
    target = tmp_path / "served-model"
    shutil.copytree(models.v1, target)
    return target


@pytest.fixture(scope="session")
def reference(models: Models) -> dict[str, dict[str, list[int]]]:
    """Greedy outputs of every prompt from engines without any connector, per version."""
    out: dict[str, dict[str, list[int]]] = {}
    for version, path in (("v1", models.v1), ("v2", models.v2)):
        engine = EngineProcess(path)
        try:
            results = engine.generate(list(PROMPTS.values()))
        finally:
            engine.close()
        out[version] = {name: r["tokens"] for name, r in zip(PROMPTS, results, strict=True)}
    assert out["v1"] != out["v2"], "v2 must behave differently from v1 for the test to mean much"
    return out


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sidecar(models: Models) -> Iterator[SidecarServer]:
    """A sidecar (embedded store) fingerprinting v1 at start, as a pod runs next to vLLM."""
    server = SidecarServer(model_path=models.v1)
    server.start()
    yield server
    server.stop()
