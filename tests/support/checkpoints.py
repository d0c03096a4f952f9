"""Builders for small, real Hugging Face style checkpoints (fingerprint and prewarm tests).

Weights are written with `safetensors.numpy.save_file`; `write_raw_safetensors`
writes arbitrary (also malformed) headers. Files are back-dated by default so the
full-mode memo, which refuses files modified in the last seconds, will record them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

Tensors = dict[str, np.ndarray]

HIDDEN = 64
INTERMEDIATE = 176
VOCAB = 256
CHAT_TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
BACKDATE_S = 3600


def llama_tensors(layers: int = 3, seed: int = 0, dtype: type = np.float32) -> Tensors:
    """A tiny Llama-shaped state dict; mlp and embedding tensors exceed fast mode's
    whole-tensor limit (so they are window-sampled), norms do not."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    t: Tensors = {"model.embed_tokens.weight": w(VOCAB, HIDDEN), "model.norm.weight": w(HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + f"self_attn.{proj}.weight"] = w(HIDDEN, HIDDEN)
        t[p + "mlp.gate_proj.weight"] = w(INTERMEDIATE, HIDDEN)
        t[p + "mlp.up_proj.weight"] = w(INTERMEDIATE, HIDDEN)
        t[p + "mlp.down_proj.weight"] = w(HIDDEN, INTERMEDIATE)
        t[p + "input_layernorm.weight"] = w(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = w(HIDDEN)
    t["lm_head.weight"] = w(VOCAB, HIDDEN)
    return t


def write_model(
    root: Path,
    tensors: Mapping[str, np.ndarray],
    *,
    shards: int = 1,
    index: bool | None = None,
    shuffle: bool = False,
    config: Mapping[str, Any] | None = None,
    generation_config: Mapping[str, Any] | None = None,
    chat_template: str = CHAT_TEMPLATE,
    tokenizer: bool = True,
) -> Path:
    """Write a model directory at `root` with `tensors` split over `shards` files.

    index defaults to shards > 1; shuffle assigns tensors to shards round-robin in
    reverse name order instead of contiguous runs in name order.
    """
    root.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "_name_or_path": str(root)}
    _write_json(root / "config.json", config if config is not None else cfg)
    gen = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": 2}
    _write_json(
        root / "generation_config.json", gen if generation_config is None else generation_config
    )
    if tokenizer:
        write_tokenizer(root, chat_template)
    names = sorted(tensors, reverse=shuffle)
    groups: list[list[str]] = [[] for _ in range(shards)]
    for i, name in enumerate(names):
        groups[i % shards if shuffle else i * shards // len(names)].append(name)
    weight_map = {}
    for i, group in enumerate(groups):
        fname = (
            "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        )
        save_file(
            {n: np.ascontiguousarray(tensors[n]) for n in group},
            str(root / fname),
            metadata={"format": "pt"},
        )
        weight_map.update(dict.fromkeys(group, fname))
    if index if index is not None else shards > 1:
        _write_json(
            root / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map}
        )
    backdate(root)
    return root


def write_tokenizer(root: Path, chat_template: str = CHAT_TEMPLATE) -> None:
    """Write tokenizer.json, tokenizer_config.json (with the chat template) and special tokens."""
    vocab = {f"t{i}": i for i in range(VOCAB)}
    _write_json(
        root / "tokenizer.json", {"version": "1.0", "model": {"type": "BPE", "vocab": vocab}}
    )
    _write_json(
        root / "tokenizer_config.json",
        {"chat_template": chat_template, "bos_token": "<s>", "name_or_path": str(root)},
    )
    _write_json(root / "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>"})


def write_adapter(
    root: Path, tensors: Mapping[str, np.ndarray], config: Mapping[str, Any] | None = None
) -> Path:
    """Write a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    _write_json(root / "adapter_config.json", config if config is not None else cfg)
    save_file(dict(tensors), str(root / "adapter_model.safetensors"))
    backdate(root)
    return root


def lora_tensors(layers: int = 3, rank: int = 4, seed: int = 1) -> Tensors:
    """LoRA A/B matrices for q_proj and v_proj of each layer."""
    rng = np.random.default_rng(seed)
    t: Tensors = {}
    for i in range(layers):
        for proj in ("q_proj", "v_proj"):
            p = f"base_model.model.model.layers.{i}.self_attn.{proj}."
            t[p + "lora_A.weight"] = rng.standard_normal((rank, HIDDEN)).astype(np.float32)
            t[p + "lora_B.weight"] = rng.standard_normal((HIDDEN, rank)).astype(np.float32)
    return t


def edit(tensors: Mapping[str, np.ndarray], fn: Callable[[str, np.ndarray], np.ndarray]) -> Tensors:
    """A copy of `tensors` with each tensor replaced by fn(name, copy of tensor)."""
    return {n: fn(n, a.copy()) for n, a in tensors.items()}


def write_raw_safetensors(
    path: Path, header: Mapping[str, Any] | bytes, data: bytes, *, header_len: int | None = None
) -> Path:
    """Write a safetensors file byte for byte: length prefix (or `header_len`), header, data."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(raw) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", length) + raw + data)
    return path


def hf_cache_layout(model_dir: Path, cache_root: Path, revision: str = "0123abcd") -> Path:
    """Move `model_dir`'s files into a Hugging Face hub cache layout; return the snapshot dir.

    Every file becomes blobs/<sha256> with a relative symlink in snapshots/<revision>/.
    """
    blobs = cache_root / "blobs"
    snapshot = cache_root / "snapshots" / revision
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(model_dir.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.move(str(f), blobs / digest)
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", digest))
    return snapshot


def backdate(root: Path, seconds: int = BACKDATE_S) -> None:
    """Set every file's mtime under `root` `seconds` into the past."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            os.utime(
                os.path.join(dirpath, name), ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9)
            )


def _write_json(path: Path, obj: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2))
