"""Full-mode memo: a restart does not rehash unchanged shards, and changed ones are rehashed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from infercache_client.fingerprint import FingerprintError, default_cache_file, fingerprint, hashing
from infercache_client.fingerprint.safetensors_header import TensorEntry

from tests.support.checkpoints import backdate, llama_tensors, write_model


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "m", llama_tensors(layers=2), shards=2)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of tensors whose bytes full mode actually read and hashed."""
    names: list[str] = []
    real = hashing.digest_tensor

    def counting(fd: int, entry: TensorEntry, path: str) -> bytes:
        names.append(entry.name)
        return real(fd, entry, path)

    monkeypatch.setattr(hashing, "digest_tensor", counting)
    return names


def test_second_full_run_reads_no_tensor_bytes(
    model: Path, tmp_path: Path, hashed: list[str]
) -> None:
    """With a memo file, the second full-mode run (a fresh Memo, like a restart) hashes nothing."""
    memo = tmp_path / "cache" / "fingerprints.json"
    first = fingerprint(model, mode="full", cache_file=memo)
    assert len(hashed) == first.tensors
    hashed.clear()
    assert fingerprint(model, mode="full", cache_file=memo) == first
    assert hashed == []
    assert fingerprint(model, mode="full") == first  # memo-free recomputation agrees


def test_memo_file_records_identity_and_is_replaced_atomically(model: Path, tmp_path: Path) -> None:
    """The memo maps each shard's real path to size/mtime_ns/inode/device/ctime_ns, leaving
    no temp files."""
    memo = tmp_path / "fingerprints.json"
    fingerprint(model, mode="full", cache_file=memo)
    files = json.loads(memo.read_text())["files"]
    shards = sorted(model.glob("*.safetensors"))
    assert sorted(files) == [os.path.realpath(p) for p in shards]
    for shard in shards:
        st = shard.stat()
        entry = files[os.path.realpath(shard)]
        assert (
            entry["size"],
            entry["mtime_ns"],
            entry["inode"],
            entry["device"],
            entry["ctime_ns"],
        ) == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_shard_patched_in_place_with_its_mtime_restored_is_rehashed(
    model: Path, tmp_path: Path, hashed: list[str]
) -> None:
    """Same path, inode, size and mtime but new bytes: the ctime moved, so the memo is not
    used and the fingerprint changes (a memo keyed by size/mtime/inode reused the old one)."""
    memo = tmp_path / "fingerprints.json"
    first = fingerprint(model, mode="full", cache_file=memo)
    shard = sorted(model.glob("*.safetensors"))[0]
    st = shard.stat()
    with open(shard, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = shard.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )
    hashed.clear()
    second = fingerprint(model, mode="full", cache_file=memo)
    assert hashed
    assert second != first


def test_touched_shard_is_rehashed_alone(model: Path, tmp_path: Path, hashed: list[str]) -> None:
    """Changing one shard's mtime rehashes that shard only."""
    memo = tmp_path / "fingerprints.json"
    fingerprint(model, mode="full", cache_file=memo)
    shard = sorted(model.glob("*.safetensors"))[0]
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    hashed.clear()
    fingerprint(model, mode="full", cache_file=memo)
    assert hashed
    index = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert {index[name] for name in hashed} == {shard.name}


def test_rewritten_shard_changes_full_fingerprint_despite_memo(model: Path, tmp_path: Path) -> None:
    """Rewriting a shard with new weights is noticed (new mtime/inode), never served from memo."""
    memo = tmp_path / "fingerprints.json"
    before = fingerprint(model, mode="full", cache_file=memo)
    tensors = {k: v * np.float32(2) for k, v in llama_tensors(layers=2).items()}
    write_model(model, tensors, shards=2)
    after = fingerprint(model, mode="full", cache_file=memo)
    assert after.weights != before.weights


def test_recently_modified_files_are_not_memoised(
    model: Path, tmp_path: Path, hashed: list[str]
) -> None:
    """A shard modified within the last seconds is hashed but not recorded (racy mtime)."""
    memo = tmp_path / "fingerprints.json"
    for shard in model.glob("*.safetensors"):
        shard.touch()
    fingerprint(model, mode="full", cache_file=memo)
    hashed.clear()
    fingerprint(model, mode="full", cache_file=memo)
    assert hashed
    backdate(model)
    fingerprint(model, mode="full", cache_file=memo)
    hashed.clear()
    fingerprint(model, mode="full", cache_file=memo)
    assert hashed == []


def test_fast_mode_neither_reads_nor_writes_the_memo(model: Path, tmp_path: Path) -> None:
    """Fast mode is cheap enough to recompute; it never creates the memo file."""
    memo = tmp_path / "fingerprints.json"
    fingerprint(model, mode="fast", cache_file=memo)
    assert not memo.exists()


def test_corrupt_memo_is_ignored_and_rewritten(model: Path, tmp_path: Path) -> None:
    """An unparsable memo file is treated as empty, then replaced with a valid one."""
    memo = tmp_path / "fingerprints.json"
    memo.write_text("{not json")
    expected = fingerprint(model, mode="full")
    assert fingerprint(model, mode="full", cache_file=memo) == expected
    assert json.loads(memo.read_text())["format"] == "infercache-fingerprint-memo"


def test_memo_with_malformed_entry_falls_back_to_hashing(
    model: Path, tmp_path: Path, hashed: list[str]
) -> None:
    """A memo entry with the right identity but a malformed digest is not trusted."""
    memo = tmp_path / "fingerprints.json"
    expected = fingerprint(model, mode="full", cache_file=memo)
    doc = json.loads(memo.read_text())
    for entry in doc["files"].values():
        entry["tensors"][0][3] = "zz"
    memo.write_text(json.dumps(doc))
    hashed.clear()
    assert fingerprint(model, mode="full", cache_file=memo) == expected
    assert hashed


def test_cache_file_that_is_a_directory_is_an_error(model: Path, tmp_path: Path) -> None:
    """A cache-file path naming a directory is refused up front."""
    with pytest.raises(FingerprintError, match="not a regular file"):
        fingerprint(model, mode="full", cache_file=tmp_path)


def test_unwritable_memo_location_does_not_fail_fingerprinting(model: Path, tmp_path: Path) -> None:
    """If the memo cannot be written (its parent is a file), fingerprinting still succeeds."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    fp = fingerprint(model, mode="full", cache_file=blocker / "fingerprints.json")
    assert fp == fingerprint(model, mode="full")


def test_default_cache_file_follows_xdg_then_home() -> None:
    """The default memo path is $XDG_CACHE_HOME/infercache/..., else ~/.cache/infercache/..."""
    tail = Path("infercache", "fingerprints.json")
    assert default_cache_file({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x") / tail
    assert default_cache_file({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path("/h/.cache") / tail
    assert default_cache_file({"HOME": "/h"}) == Path("/h/.cache") / tail


def test_shard_modified_during_hashing_is_an_error(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard whose mtime changes while it is hashed fails instead of being memoised."""
    memo = tmp_path / "fingerprints.json"
    real = hashing.digest_tensor

    def touching(fd: int, entry: TensorEntry, path: str) -> bytes:
        os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))
        return real(fd, entry, path)

    monkeypatch.setattr(hashing, "digest_tensor", touching)
    with pytest.raises(FingerprintError, match="changed while"):
        fingerprint(model, mode="full", cache_file=memo)
    assert not memo.exists()
