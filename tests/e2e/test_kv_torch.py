"""KV without torch, and torch loaded at start: real `sidecar serve` processes, real gRPC.

The no-torch server is this interpreter with a meta-path finder that refuses `torch`
(what an install without the `kv` extra looks like), not an uninstall.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import grpc
import pytest
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc

from tests.support.processes import REPO, free_port, stop_process
from tests.support.sidecars import SidecarProcess, cli_env, config_overrides, health_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LAYOUT = pb.KvLayout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=pb.KV_DTYPE_FLOAT32
)

WITHOUT_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from sidecar.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


def _attach(target: str) -> pb.AttachHotTierResponse:
    with grpc.insecure_channel(target) as channel:
        resp: pb.AttachHotTierResponse = kv_pb2_grpc.KvCacheServiceStub(channel).AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-1", layout=LAYOUT), timeout=60
        )
    return resp


@pytest.fixture
def no_torch_server() -> Iterator[tuple[str, subprocess.Popen[bytes], object]]:
    """`serve` (embedded stores) in a process where torch cannot be imported."""
    port = free_port()
    overrides = config_overrides(
        None, listen=f"127.0.0.1:{port}", admin_listen="", log_format="json"
    )
    args = [sys.executable, "-c", WITHOUT_TORCH, "serve"]
    for name, value in overrides.items():
        args += [f"--{name.replace('_', '-')}", value]
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(args, cwd=REPO, env=cli_env(None), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while health_status(f"127.0.0.1:{port}", 0.5) != 1:
            assert proc.poll() is None, "serve exited early"
            assert time.monotonic() < deadline, "serve did not become SERVING"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", proc, log
    finally:
        stop_process(proc)
        log.close()


def test_attach_without_torch_is_refused_naming_the_kv_extra(
    no_torch_server: tuple[str, subprocess.Popen[bytes], object],
) -> None:
    """A valid AttachHotTier on a server without torch answers FAILED_PRECONDITION naming
    the `kv` extra (before: UNKNOWN 'ModuleNotFoundError: torch' with a traceback); the
    server keeps serving, and says so once in its log."""
    target, proc, log = no_torch_server
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as caught:
            _attach(target)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION, caught.value
        assert "kv extra" in (caught.value.details() or "")
    assert health_status(target) == 1
    assert proc.poll() is None
    log.seek(0)  # type: ignore[attr-defined]
    text = log.read().decode(errors="replace")  # type: ignore[attr-defined]
    assert text.count("kv_tier_without_torch") == 1, text[-2000:]
    assert "Traceback" not in text, text[-2000:]


def _maps_torch(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return "libtorch" in f.read()


def test_torch_is_loaded_at_start_not_by_the_first_caller() -> None:
    """With the KV tier enabled and torch installed, torch is in the sidecar's memory soon
    after start without any KV call (before: only once some caller attached)."""
    pytest.importorskip("torch")
    proc = SidecarProcess(None, kv_enabled=True)
    try:
        proc.wait_ready()
        deadline = time.monotonic() + 60
        while not _maps_torch(proc.proc.pid):
            assert time.monotonic() < deadline, "torch was not loaded within 60 s of start"
            time.sleep(0.2)
        # And the tier works with it.
        assert _attach(proc.target).attachment_id
    finally:
        proc.stop()
