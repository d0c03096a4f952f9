"""Stale KV pool files: a sidecar killed with SIGKILL leaves its shared-memory files,
and the next one started on the same directory removes them, and only them."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import grpc
import pytest
from infercache.v1 import kv_pb2 as pb
from infercache.v1 import kv_pb2_grpc

from sidecar.kv.pool_files import create_locked, is_ours, remove_stale
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

LAYOUT = pb.KvLayout(
    num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=4, dtype=pb.KV_DTYPE_FLOAT32
)


def _attach(target: str) -> pb.AttachHotTierResponse:
    with grpc.insecure_channel(target) as channel:
        resp: pb.AttachHotTierResponse = kv_pb2_grpc.KvCacheServiceStub(channel).AttachHotTier(
            pb.AttachHotTierRequest(model_fingerprint="fp-1", layout=LAYOUT), timeout=60
        )
    return resp


def _start(shm: Path) -> SidecarProcess:
    """A sidecar with the KV tier and an 8 MiB pool in `shm`."""
    return SidecarProcess(None, kv_enabled=True, kv_shm_dir=str(shm), kv_pool_bytes="8MiB")


def _ours(directory: Path) -> set[str]:
    """Names of the regular files (not links) in `directory` that have our pattern."""
    return {
        p.name
        for p in directory.iterdir()
        if is_ours(p.name) and p.is_file() and not p.is_symlink()
    }


def test_a_killed_sidecars_pool_files_are_removed_by_the_next_start(tmp_path: Path) -> None:
    """After SIGKILL the pool and generations files stay; the restarted sidecar removes
    them at start (before any attachment), and leaves a live sidecar's locked file, a
    symbolic link and a directory with our names, and files with other names."""
    pytest.importorskip("torch")
    shm = tmp_path / "shm"
    shm.mkdir()
    first = _start(shm)
    try:
        first.wait_ready()
        _attach(first.target)
        killed = _ours(shm)
        assert len(killed) == 2, killed  # the pool and its generations
        assert sum((shm / n).stat().st_size for n in killed) >= 8 << 20
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
    finally:
        first.stop()
    assert _ours(shm) == killed, "SIGKILL leaves them (nobody unlinks)"

    live = create_locked(str(shm), "infercache-kv-")  # another sidecar's, alive
    (shm / "infercache-kv-1-0123456789abcdef.txt").write_bytes(b"not ours")
    (shm / "unrelated").write_bytes(b"x")
    os.symlink(shm / "unrelated", shm / "infercache-kv-2-0123456789abcdef")
    (shm / "infercache-kvgen-3-0123456789abcdef").mkdir()
    second = _start(shm)
    try:
        second.wait_ready()
        left = set(os.listdir(shm))
        assert not killed & left, "the killed sidecar's files are gone"
        assert left == {
            Path(live.path).name,
            "infercache-kv-1-0123456789abcdef.txt",
            "unrelated",
            "infercache-kv-2-0123456789abcdef",
            "infercache-kvgen-3-0123456789abcdef",
        }
        assert "kv_stale_pool_file_removed" in second.stderr()
        location = _attach(second.target)
        assert location.attachment_id
        assert len(_ours(shm) - {Path(live.path).name}) == 2, "its own new pair"
        # Its own files are locked while it lives: another sweep leaves them.
        assert remove_stale(str(shm)) == []
    finally:
        second.stop()
        live.release()
    assert _ours(shm) == set(), "a stopped sidecar unlinks its own"


def test_a_file_is_locked_from_the_moment_it_has_its_name(tmp_path: Path) -> None:
    """create_locked's file cannot be taken exclusively while its creator holds it, and
    release unlinks it before letting go."""
    f = create_locked(str(tmp_path), "infercache-kvgen-")
    assert is_ours(Path(f.path).name)
    assert os.stat(f.path).st_mode & 0o777 == 0o600
    fd = os.open(f.path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    f.release()
    assert not os.path.exists(f.path)
