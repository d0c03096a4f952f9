"""The weights component: every tensor of every shard, hashed in name order.

Per tensor the digest takes (name, dtype, shape, evidence), where evidence is the
sampled bytes (fast mode) or BLAKE3 of all the tensor's bytes (full mode). Offsets,
shard boundaries, file names, paths and timestamps never enter, so re-sharding or
copying identical weights leaves the digest unchanged.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.hashing import (
    Evidence,
    RecordParts,
    digest_all,
    keyed_hasher,
    record_parts,
)
from infercache_client.fingerprint.memo import FileKey, Memo, MemoTensor
from infercache_client.fingerprint.safetensors_header import DTYPE_BITS, TensorEntry, read_header
from infercache_client.fingerprint.sampling import sample_all

Mode = Literal["fast", "full"]

INDEX_FILE = "model.safetensors.index.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
NEW_EMBEDDINGS = "new_embeddings.safetensors"
CONSOLIDATED = "consolidated.safetensors"


@dataclass(frozen=True, slots=True)
class WeightsDigest:
    """The weights component and what it covered."""

    digest: str
    tensors: int
    nbytes: int


def model_shards(root: Path) -> tuple[list[Path], dict[str, str] | None]:
    """Shard paths of a model directory and its index's weight map (None if no index).

    With an index, its shards are the weights (a loader ignores other files); without
    one, every top-level *.safetensors file is.
    """
    index_path = root / INDEX_FILE
    if not index_path.exists():
        shards = sorted(root.glob("*.safetensors"))
        if not shards:
            raise FingerprintError(f"{root}: no *.safetensors weights (other formats unsupported)")
        return shards, None
    try:
        weight_map = json.loads(index_path.read_bytes())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FingerprintError(f"{index_path}: unreadable shard index ({exc})") from exc
    if not (
        isinstance(weight_map, dict)
        and weight_map
        and all(isinstance(v, str) for v in weight_map.values())
        and all(_plain_name(v) for v in set(weight_map.values()))
    ):
        raise FingerprintError(f"{index_path}: weight_map must map tensor names to file names")
    return [root / name for name in sorted(set(weight_map.values()))], weight_map


def adapter_shards(root: Path) -> list[Path]:
    """The single weights file of a PEFT LoRA adapter directory."""
    path = root / ADAPTER_WEIGHTS
    if not path.exists():
        raise FingerprintError(f"{root}: no {ADAPTER_WEIGHTS} (other formats unsupported)")
    return [path]


def extra_weight_files(root: Path, kind: str, index: Mapping[str, str] | None) -> list[Path]:
    """Weights a loader may read besides the shards: a LoRA adapter's
    new_embeddings.safetensors (added tokens), and a model's consolidated.safetensors
    beside an index (vLLM's Mistral format loads it instead of the indexed shards)."""
    names = [NEW_EMBEDDINGS] if kind == "adapter" else [CONSOLIDATED] if index is not None else []
    return [root / n for n in names if (root / n).exists() or (root / n).is_symlink()]


def weights_digest(
    shards: Sequence[Path],
    index: Mapping[str, str] | None,
    mode: Mode,
    memo: Memo | None,
    threads: int,
) -> WeightsDigest:
    """Digest every tensor in `shards` (checked against `index` if given) in `mode`."""
    started_ns = time.time_ns()
    fds: list[int] = []
    try:
        opened = []
        for path in shards:
            fd, st = _open(path, mode)
            fds.append(fd)
            opened.append((path, fd, st))
        records, nbytes = _collect(opened, index, mode, memo, threads, started_ns)
    finally:
        for fd in fds:
            os.close(fd)
    # By name; names are unique across shards (_collect checks), so records never compare.
    records.sort()
    hasher = keyed_hasher(f"weights {mode}")
    hasher.update(len(records).to_bytes(8, "little"))
    # One update over the joined records: a thousand small updates cost more than the join.
    hasher.update(b"".join([part for _, parts in records for part in parts]))
    return WeightsDigest(hasher.hexdigest(), len(records), nbytes)


def _collect(
    opened: Sequence[tuple[Path, int, os.stat_result]],
    index: Mapping[str, str] | None,
    mode: Mode,
    memo: Memo | None,
    threads: int,
    started_ns: int,
) -> tuple[list[tuple[str, RecordParts]], int]:
    # (name, record_parts) of every tensor, and their bytes in all.
    records: list[tuple[str, RecordParts]] = []
    nbytes = 0
    owner: dict[str, Path] = {}
    shard_names: list[tuple[Path, list[str]]] = []
    jobs: list[tuple[int, TensorEntry, str]] = []
    fresh: list[tuple[Path, int, os.stat_result, tuple[TensorEntry, ...]]] = []
    for path, fd, st in opened:
        # Only the full-mode memo needs the key (realpath costs an lstat per component).
        remembered = None
        if memo is not None and mode == "full":
            remembered = memo.get(FileKey.of(os.path.realpath(path), st))
        if remembered is not None:
            names = [t.name for t in remembered]
            records += [
                (t.name, record_parts(t.name, t.dtype, t.shape, t.digest)) for t in remembered
            ]
            nbytes += sum(_nbytes(t) for t in remembered)
        else:
            entries = _read_header(fd, st, path)
            names = [e.name for e in entries]
            if mode == "full":
                jobs.extend((fd, e, str(path)) for e in entries)
            fresh.append((path, fd, st, entries))
        if not owner.keys().isdisjoint(names):
            name = next(n for n in names if n in owner)
            raise FingerprintError(f"tensor {name!r} is in both {owner[name]} and {path}")
        owner.update(dict.fromkeys(names, path))
        shard_names.append((path, names))
    if index is not None:
        _check_index(index, shard_names)
    evidence: Sequence[Sequence[Evidence]]
    try:
        if mode == "full":
            digests = iter(digest_all(jobs, threads))
            evidence = [[next(digests) for _ in entries] for _, _, _, entries in fresh]
        else:
            evidence = sample_all([(fd, e, str(path)) for path, fd, _, e in fresh], threads)
    except OSError as exc:
        raise FingerprintError(f"cannot read weights ({exc})") from exc
    # `evidence` lists the fresh shards' tensors in their order.
    for (path, fd, st, entries), shard_evidence in zip(fresh, evidence, strict=True):
        if _identity(os.fstat(fd)) != _identity(st):
            raise FingerprintError(f"{path}: file changed while it was being fingerprinted")
        hashed = list(zip(entries, shard_evidence, strict=True))
        records += [(e.name, record_parts(e.name, e.dtype, e.shape, ev)) for e, ev in hashed]
        # Entries tile the shard's data region (read_header checks), in file order.
        nbytes += entries[-1].end - entries[0].start if entries else 0
        if memo is not None and mode == "full":
            recorded = tuple(MemoTensor(e.name, e.dtype, e.shape, bytes(ev)) for e, ev in hashed)
            memo.put(FileKey.of(os.path.realpath(path), st), recorded, started_ns)
    if memo is not None and mode == "full":
        memo.save()
    return records, nbytes


def _check_index(index: Mapping[str, str], shards: Sequence[tuple[Path, list[str]]]) -> None:
    # A loader trusts the index; a fingerprint that disagreed with it would describe
    # different weights from the ones served. `shards`: each shard and its tensors'
    # names, unique across shards.
    held = 0
    for path, names in shards:
        file_name = path.name
        for name in names:
            listed = index.get(name)
            if listed != file_name:
                where = "does not list it" if listed is None else f"says {listed}"
                raise FingerprintError(
                    f"{INDEX_FILE}: tensor {name!r} is in {path} but the index {where}"
                )
        held += len(names)
    # Every name held is listed, so the index lists more only if it names a tensor
    # that no shard holds.
    if len(index) != held:
        owned = {name for _, names in shards for name in names}
        missing = sorted(set(index) - owned)
        raise FingerprintError(f"{INDEX_FILE}: lists tensor {missing[0]!r} that no shard holds")


def _read_header(fd: int, st: os.stat_result, path: Path) -> tuple[TensorEntry, ...]:
    try:
        return read_header(fd, st.st_size, str(path)).tensors
    except OSError as exc:
        raise FingerprintError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _open(path: Path, mode: Mode) -> tuple[int, os.stat_result]:
    try:
        # O_NONBLOCK: a FIFO posing as a shard must fail the S_ISREG check, not hang here.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        reason = "dangling symlink" if path.is_symlink() and not path.exists() else exc.strerror
        raise FingerprintError(f"{path}: cannot open ({reason or exc})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FingerprintError(f"{path}: not a regular file")
    if hasattr(os, "posix_fadvise"):
        # Cold, readahead would fetch ~128 KiB around each 256-byte sample in fast mode,
        # and too little ahead of full mode's sequential reads.
        advice = os.POSIX_FADV_RANDOM if mode == "fast" else os.POSIX_FADV_SEQUENTIAL
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, advice)
    return fd, st


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def _nbytes(t: MemoTensor) -> int:
    return math.prod(t.shape) * DTYPE_BITS.get(t.dtype, 0) // 8


def _plain_name(name: str) -> bool:
    # Index entries name files beside the index, never paths elsewhere.
    return name not in ("", ".", "..") and os.path.basename(name) == name and "\\" not in name
