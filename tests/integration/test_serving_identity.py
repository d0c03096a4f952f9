"""Declared serving options are part of the pod's identity over real gRPC: the same files
served with another --dtype are another model_version, so they never share entries."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from tests.support.checkpoints import llama_tensors, write_model
from tests.support.sidecars import config_overrides, fleet_sidecar

pytestmark = pytest.mark.timeout(60)


async def test_serving_options_change_the_pods_model_version(tmp_path: Path) -> None:
    """Two pods with identical files but --dtype bfloat16 vs float16 report different
    fingerprints in GetServerInfo, and a Store keyed by one is refused by the other."""
    model = write_model(tmp_path / "m", llama_tensors(layers=1, seed=3))
    versions = []
    for dtype in ("bfloat16", "float16"):
        serving = tmp_path / f"{dtype}.json"
        serving.write_text(json.dumps({"--dtype": dtype, "--max-model-len": 4096}))
        settings = config_overrides(None, model_path=str(model), serving_config=str(serving))
        async with fleet_sidecar(settings, fingerprint=True) as sc:
            versions.append((await sc.client.server_info()).model_version)
            if len(versions) == 2:
                k = make_key(tenant="acme", model_version=versions[0], prompt_version="p", text="q")
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await sc.client.store(k, b"answer", lease=b"")
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                miss = await sc.client.lookup(make_key(tenant="acme", prompt_version="p", text="q"))
                assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    assert versions[0] != versions[1]
    assert all(v.startswith("fp1-") for v in versions)
