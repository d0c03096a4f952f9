"""A sidecar started with a model path keys on that model's fingerprint and guards Stores."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import kv_pb2 as kv_pb
from infercache.v1 import kv_pb2_grpc
from infercache_client import AsyncCacheClient, make_key
from infercache_client.fingerprint import fingerprint

from sidecar.testing import in_process_sidecar
from tests.support.checkpoints import llama_tensors, lora_tensors, write_adapter, write_model
from tests.support.sidecars import isolated_env


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small real safetensors model and a LoRA adapter."""
    root = tmp_path_factory.mktemp("pod")
    model = write_model(root / "model", llama_tensors())
    adapter = write_adapter(root / "adapter", lora_tensors())
    return model, adapter


async def _client(**settings: str) -> AsyncIterator[AsyncCacheClient]:
    async with in_process_sidecar(settings, fingerprint=True) as sc:
        yield sc.client


@pytest.fixture
async def pod(model_dirs: tuple[Path, Path]) -> AsyncIterator[AsyncCacheClient]:
    """A sidecar fingerprinting the model and the adapter (named "sql") at start."""
    model, adapter = model_dirs
    async for client in _client(model_path=str(model), adapters=f"sql={adapter}"):
        yield client


async def test_server_info_reports_the_measured_fingerprints(
    pod: AsyncCacheClient, model_dirs: tuple[Path, Path]
) -> None:
    """GetServerInfo returns the fingerprints computed from the files, not names."""
    model, adapter = model_dirs
    info = await pod.server_info()
    assert info.model_version == fingerprint(model).value
    assert dict(info.adapter_versions) == {"sql": fingerprint(adapter, kind="adapter").value}


async def test_empty_model_version_means_this_pods_model(pod: AsyncCacheClient) -> None:
    """A key with no model_version is the same key as one naming the pod's fingerprint."""
    info = await pod.server_info()
    implicit = make_key(tenant="t", prompt_version="p", text="q")
    explicit = make_key(tenant="t", prompt_version="p", text="q", model_version=info.model_version)
    miss = await pod.lookup(implicit)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    stored = await pod.store(implicit, b"answer", lease=miss.lease)
    assert stored.outcome == pb.STORE_OUTCOME_STORED
    hit = await pod.lookup(explicit)
    assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
    assert hit.payload == b"answer"
    assert hit.key_digest == miss.key_digest


async def test_adapter_name_resolves_to_its_fingerprint(pod: AsyncCacheClient) -> None:
    """Naming a configured adapter keys on its fingerprint, distinct from no adapter."""
    info = await pod.server_info()
    by_name = await pod.lookup(
        make_key(tenant="t", prompt_version="p", text="q", adapter_version="sql")
    )
    by_fp = await pod.lookup(
        make_key(
            tenant="t", prompt_version="p", text="q", adapter_version=info.adapter_versions["sql"]
        )
    )
    plain = await pod.lookup(make_key(tenant="t", prompt_version="p", text="q"))
    assert by_name.key_digest == by_fp.key_digest
    assert by_name.key_digest != plain.key_digest


async def test_store_for_foreign_weights_is_refused(pod: AsyncCacheClient) -> None:
    """A Store claiming another model_version fails FAILED_PRECONDITION and stores nothing."""
    key = make_key(tenant="t", prompt_version="p", text="q", model_version="fp1-not-this-pod")
    miss = await pod.lookup(key)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await pod.store(key, b"answer", lease=miss.lease)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "fp1-not-this-pod" in (err.value.details() or "")
    assert (await pod.lookup(key)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_foreign_store_allowed_by_setting(model_dirs: tuple[Path, Path]) -> None:
    """INFERCACHE_ALLOW_FOREIGN_MODEL_STORE lets a pod store results for other weights."""
    model, _ = model_dirs
    async for client in _client(model_path=str(model), allow_foreign_model_store="true"):
        key = make_key(tenant="t", prompt_version="p", text="q", model_version="fp1-other")
        miss = await client.lookup(key)
        stored = await client.store(key, b"answer", lease=miss.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED


@pytest.mark.parametrize("allow_foreign", [False, True])
async def test_kv_attach_with_other_weights_is_refused_unless_allowed(
    model_dirs: tuple[Path, Path], allow_foreign: bool
) -> None:
    """A KV attachment whose model_fingerprint is not the pod's fails FAILED_PRECONDITION
    (and is counted) unless INFERCACHE_ALLOW_FOREIGN_MODEL_STORE is set; the pod's own
    fingerprint always attaches."""
    pytest.importorskip("torch")
    model, _ = model_dirs
    settings = {
        "model_path": str(model),
        "kv_pool_bytes": "4KiB",
        "allow_foreign_model_store": str(allow_foreign).lower(),
    }
    layout = kv_pb.KvLayout(
        num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=2, dtype=kv_pb.KV_DTYPE_FLOAT16
    )
    async with in_process_sidecar(settings, fingerprint=True) as sc:
        running, pod = sc.running, sc.running.app.identity.pod
        assert running.kv is not None
        async with grpc.aio.insecure_channel(sc.target) as channel:
            stub = kv_pb2_grpc.KvCacheServiceStub(channel)
            other = kv_pb.AttachHotTierRequest(model_fingerprint="fp1-other", layout=layout)
            if allow_foreign:
                assert (await stub.AttachHotTier(other, timeout=60)).attachment_id
            else:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.AttachHotTier(other, timeout=60)
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "fp1-other" in (err.value.details() or "")
                assert pod.model_version in (err.value.details() or "")
            own = kv_pb.AttachHotTierRequest(model_fingerprint=pod.model_version, layout=layout)
            assert (await stub.AttachHotTier(own, timeout=60)).attachment_id
        assert running.kv.stats.foreign_attachments_refused == (0 if allow_foreign else 1)


def test_unreadable_model_path_stops_the_start(tmp_path: Path) -> None:
    """`serve --model-path` on a directory without a model exits 2 with a clear message."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "",
            "--model-path",
            str(tmp_path),
        ],
        env=isolated_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "cannot fingerprint the model" in proc.stderr
