"""Model fingerprint: what must change it, what must not, and how bad input fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from infercache_client.fingerprint import (
    ABSENT,
    Fingerprint,
    FingerprintError,
    Mode,
    diff,
    fingerprint,
    fingerprint_async,
    hashing,
    sampling,
)
from infercache_client.fingerprint import api as fp_api
from infercache_client.fingerprint import weights as fp_weights
from infercache_client.fingerprint.hashing import WHOLE_BYTES, WINDOW_BYTES, sample_spans
from infercache_client.fingerprint.safetensors_header import TensorEntry

from tests.support.checkpoints import (
    HIDDEN,
    edit,
    hf_cache_layout,
    llama_tensors,
    lora_tensors,
    write_adapter,
    write_model,
)

MODES: tuple[Mode, ...] = ("fast", "full")
BIG = "model.layers.1.mlp.up_proj.weight"  # 176 x 64 f32 = 44 KiB: window-sampled


@pytest.fixture(scope="module")
def tensors() -> dict[str, np.ndarray]:
    return llama_tensors()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tensors: dict[str, np.ndarray]) -> Path:
    return write_model(tmp_path_factory.mktemp("base") / "model", tensors, shards=2)


def both(path: Path) -> dict[str, Fingerprint]:
    return {mode: fingerprint(path, mode=mode) for mode in MODES}


@pytest.fixture(scope="module")
def base_fps(base: Path) -> dict[str, Fingerprint]:
    return both(base)


def test_value_is_stable_and_well_formed(base: Path, base_fps: dict[str, Fingerprint]) -> None:
    """Fingerprinting the same directory twice gives the same fp1-<64 hex> value."""
    for mode in MODES:
        again = fingerprint(base, mode=mode)
        assert again == base_fps[mode]
        assert re.fullmatch(r"fp1-[0-9a-f]{64}", again.value)
    assert base_fps["fast"].value != base_fps["full"].value
    assert base_fps["full"].tensors == len(llama_tensors())


def test_copy_elsewhere_keeps_fingerprint(
    base: Path, base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """Copying the files to another path with new mtimes does not change the fingerprint."""
    copy = Path(shutil.copytree(base, tmp_path / "elsewhere" / "copy"))
    for f in copy.iterdir():
        f.touch()
    assert both(copy) == base_fps


@pytest.mark.parametrize(
    ("shards", "index", "shuffle"),
    [(1, False, False), (3, True, False), (4, False, True), (5, True, True)],
)
def test_resharding_keeps_fingerprint(
    tensors: dict[str, np.ndarray],
    base_fps: dict[str, Fingerprint],
    tmp_path: Path,
    shards: int,
    index: bool,
    shuffle: bool,
) -> None:
    """Identical weights split into different shards, orders and index files hash alike."""
    resharded = write_model(tmp_path / "m", tensors, shards=shards, index=index, shuffle=shuffle)
    assert both(resharded) == base_fps


def _scaled(name: str, a: np.ndarray) -> np.ndarray:
    return a * np.float32(1.01) + np.float32(1e-4)


def _replace_big(name: str, a: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(99)
    return (rng.standard_normal(a.shape) * 0.02).astype(a.dtype) if name == BIG else a


def _merge_lora(name: str, a: np.ndarray) -> np.ndarray:
    if not name.endswith(("q_proj.weight", "v_proj.weight")):
        return a
    rng = np.random.default_rng(len(name))
    b, lo = rng.standard_normal((HIDDEN, 4)), rng.standard_normal((4, HIDDEN))
    return (a + 0.002 * (b @ lo)).astype(a.dtype)


@pytest.mark.parametrize(
    "change", [_scaled, _replace_big, _merge_lora], ids=["fine_tune", "one_tensor", "merged_lora"]
)
def test_weight_changes_change_weights_component(
    tensors: dict[str, np.ndarray],
    base_fps: dict[str, Fingerprint],
    tmp_path: Path,
    change: Callable[[str, np.ndarray], np.ndarray],
) -> None:
    """A full fine-tune, a one-tensor replacement and a merged LoRA change only `weights`."""
    changed = write_model(tmp_path / "m", edit(tensors, change), shards=2)
    for mode, fp in both(changed).items():
        assert diff(base_fps[mode], fp) == ("weights",), mode
        assert fp.value != base_fps[mode].value


def test_dtype_cast_changes_fingerprint(
    tensors: dict[str, np.ndarray], base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """Casting every tensor to float16 changes the weights component."""
    cast = write_model(tmp_path / "m", edit(tensors, lambda n, a: a.astype(np.float16)), shards=2)
    for mode, fp in both(cast).items():
        assert diff(base_fps[mode], fp) == ("weights",)


def test_single_element_edit_fast_misses_full_catches(
    tensors: dict[str, np.ndarray], base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """The documented limit: one element outside every sample window escapes fast mode only."""
    nbytes = tensors[BIG].nbytes
    sampled = {b for off, n in sample_spans(nbytes) for b in range(off, off + n)}
    element = next(i for i in range(nbytes // 4) if not sampled & set(range(4 * i, 4 * i + 4)))

    def poke(name: str, a: np.ndarray) -> np.ndarray:
        if name == BIG:
            a.reshape(-1)[element] += np.float32(1.0)
        return a

    fps = both(write_model(tmp_path / "m", edit(tensors, poke), shards=2))
    assert fps["fast"] == base_fps["fast"]
    assert diff(base_fps["full"], fps["full"]) == ("weights",)


def test_element_edit_inside_a_window_is_caught_by_fast_mode(
    tensors: dict[str, np.ndarray], base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """An edit in a sampled window (here the tensor's last element) changes fast mode too."""

    def poke(name: str, a: np.ndarray) -> np.ndarray:
        if name == BIG:
            a.reshape(-1)[-1] += np.float32(1.0)
        return a

    fps = both(write_model(tmp_path / "m", edit(tensors, poke), shards=2))
    assert diff(base_fps["fast"], fps["fast"]) == ("weights",)


@pytest.mark.parametrize(
    ("component", "mutate"),
    [
        ("tokenizer", lambda d: _rewrite(d / "tokenizer_config.json", "chat_template", "{{ x }}")),
        ("tokenizer", lambda d: _rewrite(d / "tokenizer.json", "version", "2.0")),
        ("tokenizer", lambda d: (d / "chat_template.jinja").write_text("{{ messages }}")),
        ("generation_config", lambda d: _rewrite(d / "generation_config.json", "temperature", 0.7)),
        ("config", lambda d: _rewrite(d / "config.json", "rope_theta", 500000.0)),
        ("config", lambda d: (d / "modeling_custom.py").write_text("X = 1\n")),
    ],
    ids=["chat_template", "tokenizer_json", "chat_template_jinja", "generation", "config", "code"],
)
def test_non_weight_changes_name_their_component(
    base: Path,
    base_fps: dict[str, Fingerprint],
    tmp_path: Path,
    component: str,
    mutate: Callable[[Path], object],
) -> None:
    """Chat template, tokenizer, generation and model config edits change just their component."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    mutate(copy)
    for mode, fp in both(copy).items():
        assert diff(base_fps[mode], fp) == (component,)


def test_path_keys_and_json_formatting_are_ignored(
    base: Path, base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """Re-serialised JSON and a different _name_or_path / name_or_path hash alike."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    for name, key in (("config.json", "_name_or_path"), ("tokenizer_config.json", "name_or_path")):
        obj = json.loads((copy / name).read_text())
        obj[key] = "/somewhere/else"
        (copy / name).write_text(json.dumps(dict(reversed(obj.items())), separators=(",", ":")))
    assert both(copy) == base_fps


def _rewrite(path: Path, key: str, value: object) -> None:
    obj = json.loads(path.read_text())
    obj[key] = value
    path.write_text(json.dumps(obj))


def test_missing_tokenizer_and_generation_config_are_absent(
    tensors: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """Without tokenizer files or generation_config.json those components read "absent"."""
    root = write_model(tmp_path / "m", tensors, tokenizer=False)
    (root / "generation_config.json").unlink()
    fp = fingerprint(root)
    assert fp.tokenizer == ABSENT
    assert fp.generation_config == ABSENT
    assert fp.config != ABSENT
    assert fp.weights != ABSENT


def test_missing_config_json_is_an_error(base: Path, tmp_path: Path) -> None:
    """A directory without config.json raises FingerprintError naming the file."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    (copy / "config.json").unlink()
    with pytest.raises(FingerprintError, match=r"no config\.json"):
        fingerprint(copy)


@pytest.mark.parametrize("target", ["missing", "file"])
def test_path_that_is_not_a_directory_is_an_error(tmp_path: Path, target: str) -> None:
    """A missing path or a plain file raises FingerprintError."""
    path = tmp_path / target
    if target == "file":
        path.write_text("{}")
    with pytest.raises(FingerprintError, match="not a directory"):
        fingerprint(path)


def test_no_safetensors_is_an_error(base: Path, tmp_path: Path) -> None:
    """A directory without any safetensors weights raises instead of ignoring the weights."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    for f in [*copy.glob("*.safetensors"), copy / "model.safetensors.index.json"]:
        f.unlink()
    (copy / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FingerprintError, match="no \\*\\.safetensors"):
        fingerprint(copy)


def test_hf_cache_symlinked_snapshot_matches_plain_directory(
    base: Path, base_fps: dict[str, Fingerprint], tmp_path: Path
) -> None:
    """A hub-cache snapshot of symlinks into blobs/ fingerprints like the plain directory."""
    snapshot = hf_cache_layout(Path(shutil.copytree(base, tmp_path / "m")), tmp_path / "hub")
    assert all(p.is_symlink() for p in snapshot.iterdir())
    assert both(snapshot) == base_fps
    memo = tmp_path / "memo.json"
    assert fingerprint(snapshot, mode="full", cache_file=memo) == base_fps["full"]
    recorded = json.loads(memo.read_text())["files"]
    assert all("/blobs/" in path for path in recorded)


def test_dangling_shard_symlink_is_an_error(base: Path, tmp_path: Path) -> None:
    """A snapshot whose shard blob is missing raises FingerprintError, not OSError."""
    snapshot = hf_cache_layout(Path(shutil.copytree(base, tmp_path / "m")), tmp_path / "hub")
    shard = next(snapshot.glob("*.safetensors"))
    shard.resolve().unlink()
    with pytest.raises(FingerprintError, match="dangling symlink"):
        fingerprint(snapshot)


def test_index_disagreeing_with_shards_is_an_error(base: Path, tmp_path: Path) -> None:
    """An index that puts a tensor in the wrong shard or lists a phantom tensor is rejected."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    index_path = copy / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    wm = index["weight_map"]
    shard_names = sorted(set(wm.values()))
    name = next(n for n, s in wm.items() if s == shard_names[0])
    wm[name] = shard_names[1]
    index_path.write_text(json.dumps(index))
    with pytest.raises(FingerprintError, match="the index says"):
        fingerprint(copy)
    wm[name] = shard_names[0]
    wm["phantom.weight"] = shard_names[0]
    index_path.write_text(json.dumps(index))
    with pytest.raises(FingerprintError, match="no shard holds"):
        fingerprint(copy)


def test_index_pointing_outside_the_directory_is_an_error(base: Path, tmp_path: Path) -> None:
    """Index shard names must be plain file names beside the index."""
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    index_path = copy / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../outside.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(FingerprintError, match="weight_map"):
        fingerprint(copy)


def test_tensor_in_two_shards_is_an_error(tensors: dict[str, np.ndarray], tmp_path: Path) -> None:
    """Without an index, a tensor name present in two shards is ambiguous and rejected."""
    root = write_model(tmp_path / "m", tensors)
    shutil.copy(root / "model.safetensors", root / "consolidated.safetensors")
    with pytest.raises(FingerprintError, match="is in both"):
        fingerprint(root)


def test_adapter_is_fingerprinted_on_its_own(tmp_path: Path) -> None:
    """An adapter's fingerprint covers its config and weights, not where its base model lives."""
    lora = lora_tensors()
    a = fingerprint(write_adapter(tmp_path / "a", lora), kind="adapter")
    cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    moved = write_adapter(tmp_path / "b", lora, {**cfg, "base_model_name_or_path": "/x"})
    assert fingerprint(moved, kind="adapter") == a
    retrained = write_adapter(tmp_path / "c", edit(lora, lambda n, x: x * np.float32(1.5)))
    assert diff(a, fingerprint(retrained, kind="adapter")) == ("weights",)
    rescaled = write_adapter(tmp_path / "d", lora, {**cfg, "lora_alpha": 16})
    assert diff(a, fingerprint(rescaled, kind="adapter")) == ("config",)
    assert a.kind == "adapter"
    assert a.tokenizer == ABSENT


def test_adapter_without_config_is_an_error(tmp_path: Path) -> None:
    """An adapter directory missing adapter_config.json raises FingerprintError."""
    root = write_adapter(tmp_path / "a", lora_tensors())
    (root / "adapter_config.json").unlink()
    with pytest.raises(FingerprintError, match="adapter_config"):
        fingerprint(root, kind="adapter")


def test_diff_refuses_mixed_modes(base_fps: dict[str, Fingerprint]) -> None:
    """diff() of a fast and a full fingerprint raises: their weight digests are incomparable."""
    with pytest.raises(FingerprintError, match="cannot compare"):
        diff(base_fps["fast"], base_fps["full"])
    assert diff(base_fps["fast"], base_fps["fast"]) == ()


def test_json_round_trip_and_tamper_check(base_fps: dict[str, Fingerprint]) -> None:
    """to_json() parses back to an equal value; a doctored component is detected."""
    fp = base_fps["full"]
    doc = json.loads(fp.to_json())
    assert doc["components"] == fp.components()
    assert Fingerprint.from_json(fp.to_json()) == fp
    for field, value in (("mode", "fast"), ("kind", "adapter")):
        with pytest.raises(FingerprintError, match="inconsistent"):
            Fingerprint.from_json(json.dumps({**doc, field: value}))
    doc["components"]["weights"] = "0" * 64
    with pytest.raises(FingerprintError, match="inconsistent"):
        Fingerprint.from_json(json.dumps(doc))


def test_thread_count_does_not_change_full_mode(
    base: Path, base_fps: dict[str, Fingerprint]
) -> None:
    """Full mode gives the same value on one thread and on many."""
    for threads in (1, 5):
        assert fingerprint(base, mode="full", threads=threads) == base_fps["full"]
        assert fingerprint(base, mode="fast", threads=threads) == base_fps["fast"]


async def test_async_wrapper_runs_off_the_event_loop(
    base: Path, base_fps: dict[str, Fingerprint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fingerprint_async returns the same value, computed on a thread other than the loop's."""
    threads: list[int] = []
    real = fp_weights.weights_digest

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(fp_api, "weights_digest", spy)
    assert await fingerprint_async(base, mode="full") == base_fps["full"]
    assert threads
    assert threading.get_ident() not in threads


def test_invalid_mode_is_an_error(base: Path) -> None:
    """An unknown mode raises FingerprintError instead of silently picking one."""
    with pytest.raises(FingerprintError, match="mode"):
        fingerprint(base, mode="quick")  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=1 << 40))
def test_sample_windows_lie_inside_and_span_the_tensor(nbytes: int) -> None:
    """Sample windows depend only on size, stay inside the tensor and cover both ends."""
    spans = sample_spans(nbytes)
    assert spans == sample_spans(nbytes)
    assert all(off >= 0 and off + n <= nbytes for off, n in spans)
    if nbytes <= WHOLE_BYTES:
        assert spans == (((0, nbytes),) if nbytes else ())
    else:
        assert spans[0][0] == 0
        assert spans[-1][0] + WINDOW_BYTES == nbytes
        assert [off for off, _ in spans] == sorted({off for off, _ in spans})


@pytest.mark.parametrize("relabel", ["dtype", "shape"])
def test_same_bytes_under_another_dtype_or_shape_change_weights(
    tensors: dict[str, np.ndarray], tmp_path: Path, relabel: str
) -> None:
    """Identical bytes reinterpreted as another dtype, or reshaped, change the weights digest."""
    before = write_model(tmp_path / "a", tensors)

    def change(name: str, a: np.ndarray) -> np.ndarray:
        if name != BIG:
            return a
        return a.view(np.int32) if relabel == "dtype" else a.reshape(-1)

    after = write_model(tmp_path / "b", edit(tensors, change))
    for mode in MODES:
        a, b = fingerprint(before, mode=mode), fingerprint(after, mode=mode)
        assert diff(a, b) == ("weights",)


def test_error_in_a_hashing_thread_propagates(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read error in one of full mode's worker threads fails the whole fingerprint."""
    real = hashing.digest_tensor

    def failing(fd: int, entry: TensorEntry, path: str) -> bytes:
        if entry.name == BIG:
            raise OSError(5, "Input/output error")
        return real(fd, entry, path)

    monkeypatch.setattr(hashing, "digest_tensor", failing)
    with pytest.raises(FingerprintError, match="Input/output error"):
        fingerprint(base, mode="full", threads=3)


def test_fast_mode_switches_to_parallel_reads_when_cold(
    base: Path, base_fps: dict[str, Fingerprint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When sampling looks cold, fast mode reads on a pool and still gives the same value."""
    monkeypatch.setattr(sampling, "PROBE_SEGMENTS", 4)
    monkeypatch.setattr(sampling, "POOL_SEGMENTS", 2)
    monkeypatch.setattr(sampling, "COLD_SECONDS_PER_READ", 0.0)
    readers: set[int] = set()
    real = sampling.read_segments

    def spy(fd: int, segments: Sequence[sampling.Segment]) -> list[bytes]:
        readers.add(threading.get_ident())
        return real(fd, segments)

    monkeypatch.setattr(sampling, "read_segments", spy)
    assert fingerprint(base, mode="fast", threads=4) == base_fps["fast"]
    assert len(readers - {threading.get_ident()}) >= 1
    readers.clear()
    assert fingerprint(base, mode="fast", threads=1) == base_fps["fast"]
    assert readers == {threading.get_ident()}


def test_fifo_posing_as_a_shard_is_refused_without_blocking(tmp_path: Path) -> None:
    """A named pipe called model.safetensors raises instead of hanging on open."""
    root = write_model(tmp_path / "m", llama_tensors(layers=1))
    (root / "model.safetensors").unlink()
    os.mkfifo(root / "model.safetensors")
    with pytest.raises(FingerprintError, match="not a regular file"):
        fingerprint(root)
