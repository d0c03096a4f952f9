"""The client distribution stands without the server: its code never imports the sidecar
and its `vllm` extra does not require the `infercache` distribution (issue 28 item 4).
The connector's fingerprint settings (serving config, memo file) reach the computation.

Guards over the source and the packaging metadata; tests/e2e/test_connector_fingerprint.py
runs the connector's computation beside a real sidecar process."""

from __future__ import annotations

import ast
import json
import os
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from infercache_client.fingerprint import fingerprint, pod_fingerprint
from infercache_client.vllm.config import ConnectorConfig
from infercache_client.vllm.identity import (
    AdapterFingerprints,
    FingerprintUnavailable,
    model_fingerprint,
)

CLIENT = Path(__file__).resolve().parents[1]
# The server and the dependencies only it declares.
SERVER_ONLY = ("sidecar", "structlog", "redis")


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_client_code_never_imports_the_server() -> None:
    """Guard: no module of infercache_client imports sidecar, structlog or redis."""
    offenders = {
        str(path.relative_to(CLIENT)): sorted(imported_roots(path) & set(SERVER_ONLY))
        for path in (CLIENT / "infercache_client").rglob("*.py")
    }
    assert {p: m for p, m in offenders.items() if m} == {}


def test_vllm_extra_does_not_require_the_server_distribution() -> None:
    """Guard: the `vllm` extra names torch and blake3 (the fingerprint), not infercache."""
    meta = tomllib.loads((CLIENT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = meta["project"]["optional-dependencies"]
    names = {req.split("[")[0].split("=")[0].split(">")[0].strip() for req in extras["vllm"]}
    assert "infercache" not in names
    assert {"torch", "blake3"} <= names
    assert extras["fingerprint"] == ["blake3>=1.0"]


def write_model(root: Path) -> Path:
    """A minimal model directory: config.json and one empty-tensor safetensors shard."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    data = len(header).to_bytes(8, "little") + header + b"\0" * 8
    (root / "model.safetensors").write_bytes(data)
    past = time.time() - 60  # older than the memo's racy window: memoised
    os.utime(root / "model.safetensors", (past, past))
    return root


def engine(model: Path) -> SimpleNamespace:
    return SimpleNamespace(model_config=SimpleNamespace(model=str(model)))


def test_connector_fingerprints_with_the_declared_serving_config_and_memo(
    tmp_path: Path,
) -> None:
    """kv_connector_extra_config.serving_config is a component of the connector's value
    (pod_fingerprint's, the sidecar's call), and fingerprint_cache_file is the memo."""
    model = write_model(tmp_path / "m")
    serving = tmp_path / "serving.json"
    serving.write_text(json.dumps({"--dtype": "bfloat16"}))
    memo = tmp_path / "memo.json"
    config = ConnectorConfig.from_extra(
        {"serving_config": str(serving), "fingerprint_cache_file": str(memo)}
    )
    value = model_fingerprint(engine(model), config)
    assert value == pod_fingerprint(model, serving_config=serving).value
    assert value != fingerprint(model).value  # the serving options count
    assert memo.is_file()  # full mode (the default) memoised where it was told
    with pytest.raises(FingerprintUnavailable, match=r"missing\.json"):
        model_fingerprint(
            engine(model),
            ConnectorConfig.from_extra({"serving_config": str(tmp_path / "missing.json")}),
        )


def test_adapter_fingerprints_use_the_connectors_mode(tmp_path: Path) -> None:
    """An adapter is fingerprinted in the configured mode (none when it cannot be)."""
    adapter = tmp_path / "a"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (adapter / "adapter_model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + b"\0" * 4
    )
    fast = AdapterFingerprints(ConnectorConfig.from_extra({"fingerprint_mode": "fast"}))
    assert fast.of(str(adapter)) == fingerprint(adapter, kind="adapter", mode="fast").value
    assert fast.of(str(tmp_path / "nothing")) is None
