"""The vLLM connector computes the sidecar's fingerprint without the server (issue 28 item 4).

A real `infercache serve` process fingerprints its --model-path with a declared serving
config; the connector's own computation (infercache_client.vllm.identity, what the
connector runs at engine start) runs in another process in which the server's packages
cannot be imported, on the same directory and serving config. Both must be equal, and
the sidecar must accept an attach with that value (and refuse one without the serving
options). Both use the default full-content mode and the default memo file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import torch
from infercache_client import CacheClient
from infercache_client.kv import KvCacheClient, kv_layout

from tests.support.checkpoints import llama_tensors, write_model
from tests.support.processes import REPO
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LAYOUT = kv_layout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=torch.float32
)
SERVING = {"--dtype": "bfloat16", "--max-model-len": 4096, "--override-generation-config": {}}

# The connector's computation as vLLM's process runs it, in a process where the server
# distribution (sidecar) and its own dependencies cannot be imported. With no_hashing,
# hashing a tensor fails: the value must then come from the memo alone.
CONNECTOR = """
import json, sys
for name in ("sidecar", "structlog", "redis"):
    sys.modules[name] = None
from types import SimpleNamespace
from infercache_client.vllm.config import ConnectorConfig
from infercache_client.vllm.identity import model_fingerprint
args = json.loads(sys.argv[1])
if args["no_hashing"]:
    from infercache_client.fingerprint import hashing
    def refuse(*_):
        raise AssertionError("hashed a tensor the memo covers")
    hashing.digest_tensor = refuse
engine = SimpleNamespace(model_config=SimpleNamespace(model=args["model"]))
print(model_fingerprint(engine, ConnectorConfig.from_extra(args["extra"])))
"""


def connector_fingerprint(
    model: Path, extra: dict[str, str], env: dict[str, str], *, no_hashing: bool = False
) -> str:
    """The fingerprint the connector would attach with, computed in its own process."""
    args = json.dumps({"model": str(model), "extra": extra, "no_hashing": no_hashing})
    # Only the checkout's client on the path (the repository root would offer `sidecar`).
    env = {**env, "PYTHONPATH": str(REPO / "clients" / "python")}
    out = subprocess.run(
        [sys.executable, "-c", CONNECTOR, args],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def pod_version(sidecar: SidecarProcess) -> str:
    """The sidecar's model_version (its fingerprint) from GetServerInfo."""
    with CacheClient(sidecar.target) as client:
        deadline = time.monotonic() + 30
        while not (version := client.server_info(timeout=5).model_version):
            assert time.monotonic() < deadline, "the sidecar never reported its fingerprint"
            time.sleep(0.1)
    return version


@pytest.mark.parametrize("mode", ["full", "fast"])
def test_connector_and_sidecar_agree_on_the_fingerprint_serving_config_included(
    tmp_path: Path, mode: str
) -> None:
    """The connector, with the server unimportable, computes the value the sidecar reports
    for the same model dir and serving config; the sidecar accepts an attach with it and
    refuses the value computed without the serving config (it differs). In full mode (the
    default), with both on the default memo file, the connector hashes no tensor."""
    model = write_model(tmp_path / "model", llama_tensors(layers=2, seed=11))
    # Older than the memo's racy window, so the sidecar's hashes are memoised.
    past = time.time() - 60
    for shard in model.glob("*.safetensors"):
        os.utime(shard, (past, past))
    serving = tmp_path / "serving.json"
    serving.write_text(json.dumps(SERVING))
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}  # both processes' default memo file
    # Full mode is the default on both sides: only fast mode is named.
    named = {"fingerprint_mode": mode} if mode == "fast" else {}
    sidecar = SidecarProcess(
        None,
        env=env | {f"INFERCACHE_{k.upper()}": v for k, v in named.items()},
        model_path=str(model),
        serving_config=str(serving),
        kv_pool_bytes=64 * 1024,
    )
    try:
        sidecar.wait_ready()
        expected = pod_version(sidecar)
        extra = {"serving_config": str(serving)} | named
        full = mode == "full"
        child_env = {**os.environ, **env}
        ours = connector_fingerprint(model, extra, child_env, no_hashing=full)
        assert ours == expected
        if full:
            assert (tmp_path / "xdg" / "infercache" / "fingerprints.json").is_file()
        undeclared = {k: v for k, v in extra.items() if k != "serving_config"}
        without = connector_fingerprint(model, undeclared, child_env, no_hashing=full)
        assert without != expected

        with KvCacheClient(sidecar.target) as kv:
            tier = kv.attach(model_fingerprint=ours, layout=LAYOUT, device="cpu", timeout_s=30)
            tier.close()
            with pytest.raises(grpc.RpcError) as refused:
                kv.attach(model_fingerprint=without, layout=LAYOUT, device="cpu", timeout_s=30)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        sidecar.stop()
