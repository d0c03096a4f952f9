"""Synthetic safetensors checkpoints: a Qwen2-style layout of bf16 tensors in shards with
an index, tokenizer and config files, and variants that change what a fingerprint must
notice (or, re-sharded, must not)."""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LAYERS = 83
SHARDS = 5
RESHARDS = 3
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class Spec:
    """One tensor of the layout: its name and shape (bf16)."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class Stored:
    """Where one tensor of a written safetensors file lives."""

    path: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int


# A transform maps (name, bf16 bits as uint16) to (dtype, new uint16 bits), or None to keep it.
Transform = Callable[[str, np.ndarray], tuple[str, np.ndarray] | None]


# ---------------------------------------------------------------- layout and writer


def layout(target_bytes: int) -> list[Spec]:
    """A 999-tensor model (in model order) of about `target_bytes` at 2 bytes/param."""
    coeff = LAYERS * 13 + 16  # params ~= layers * 13 h^2 + 2 * vocab * h, vocab = 8h
    h = max(64, round(math.sqrt(target_bytes / 2 / coeff) / 64) * 64)
    kv, inter, vocab = h // 4, (h * 7 // 2) // 64 * 64, 8 * h
    specs = [Spec("model.embed_tokens.weight", (vocab, h))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        specs += [
            Spec(p + "input_layernorm.weight", (h,)),
            Spec(p + "self_attn.q_proj.weight", (h, h)),
            Spec(p + "self_attn.q_proj.bias", (h,)),
            Spec(p + "self_attn.k_proj.weight", (kv, h)),
            Spec(p + "self_attn.k_proj.bias", (kv,)),
            Spec(p + "self_attn.v_proj.weight", (kv, h)),
            Spec(p + "self_attn.v_proj.bias", (kv,)),
            Spec(p + "self_attn.o_proj.weight", (h, h)),
            Spec(p + "post_attention_layernorm.weight", (h,)),
            Spec(p + "mlp.gate_proj.weight", (inter, h)),
            Spec(p + "mlp.up_proj.weight", (inter, h)),
            Spec(p + "mlp.down_proj.weight", (h, inter)),
        ]
    specs += [Spec("model.norm.weight", (h,)), Spec("lm_head.weight", (vocab, h))]
    return specs


def split(specs: Sequence[Spec], n: int) -> list[list[Spec]]:
    """Contiguous runs of roughly equal bytes, like save_pretrained's max_shard_size."""
    total = sum(s.numel for s in specs)
    groups: list[list[Spec]] = [[] for _ in range(n)]
    done = 0
    for s in specs:
        groups[min(n - 1, done * n // total)].append(s)
        done += s.numel
    return [g for g in groups if g]


def write_safetensors(path: Path, items: Sequence[tuple[Spec, str, np.ndarray]]) -> None:
    """Write (spec, dtype, uint16 bits) items as one safetensors file, data in item order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec, dtype, data in items:
        assert data.nbytes == spec.numel * 2, spec
        header[spec.name] = {
            "dtype": dtype,
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        offset += data.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data region to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for _, _, data in items:
            f.write(np.ascontiguousarray(data).tobytes())


def stored_tensors(path: Path) -> dict[str, Stored]:
    """Where each tensor of a safetensors file written above lives."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return {
        name: Stored(
            path,
            v["dtype"],
            tuple(v["shape"]),
            8 + n + v["data_offsets"][0],
            v["data_offsets"][1] - v["data_offsets"][0],
        )
        for name, v in header.items()
    }


def bf16_random(spec: Spec) -> np.ndarray:
    """Deterministic N(0, 0.02) weights as bf16 bits (norms near 1, biases small)."""
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))
    if spec.name.endswith("norm.weight"):
        return f32_to_bf16(1.0 + 0.05 * rng.standard_normal(spec.numel, dtype=np.float32))
    return f32_to_bf16(0.02 * rng.standard_normal(spec.numel, dtype=np.float32))


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values as bf16 bits (round to nearest even)."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bits as float32 values."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---------------------------------------------------------------- checkpoints


class Builder:
    """Writes the base checkpoint once, then variants that reuse its unchanged files."""

    def __init__(self, root: Path, target_bytes: int) -> None:
        self.root = root
        self.specs = layout(target_bytes)
        self.base = root / "base"
        self.stored: dict[str, Stored] = {}

    def write_base(self) -> Path:
        """Write the base checkpoint (random weights) and index its tensors."""
        self.base.mkdir(parents=True)
        self._write_shards(self.base, split(self.specs, SHARDS), lambda n, a: None, None)
        self._write_text_files(self.base, CHAT_TEMPLATE)
        for shard in sorted(self.base.glob("*.safetensors")):
            self.stored.update(stored_tensors(shard))
        return self.base

    def variant(
        self,
        name: str,
        transform: Transform,
        *,
        groups: list[list[Spec]] | None = None,
        chat_template: str = CHAT_TEMPLATE,
    ) -> Path:
        """A copy of base with `transform` applied; unchanged shards are hard links."""
        out = self.root / name
        out.mkdir()
        self._write_shards(out, groups or split(self.specs, SHARDS), transform, self.base)
        self._write_text_files(out, chat_template)
        return out

    def bits(self, spec: Spec) -> np.ndarray:
        """The base checkpoint's bf16 bits of one tensor."""
        s = self.stored[spec.name]
        return np.fromfile(s.path, dtype=np.uint16, count=s.nbytes // 2, offset=s.start)

    def _write_shards(
        self, out: Path, groups: list[list[Spec]], transform: Transform, link_from: Path | None
    ) -> None:
        weight_map = {}
        for i, group in enumerate(groups):
            fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
            items = []
            changed = False
            for spec in group:
                data = self.bits(spec) if self.stored else bf16_random(spec)
                new = transform(spec.name, data)
                changed |= new is not None
                dtype, data = new if new is not None else ("BF16", data)
                items.append((spec, dtype, data))
            names = {s.name for s in group}
            weight_map.update(dict.fromkeys((s.name for s in group), fname))
            source = None if link_from is None or changed else link_from / fname
            if source and source.exists() and stored_tensors(source).keys() == names:
                os.link(source, out / fname)
                continue
            write_safetensors(out / fname, items)
        total = sum(s.numel * 2 for s in self.specs)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

    def _write_text_files(self, out: Path, chat_template: str) -> None:
        h = self.specs[0].shape[1]
        config = {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_size": h,
            "num_hidden_layers": LAYERS,
            "torch_dtype": "bfloat16",
            "vocab_size": self.specs[0].shape[0],
            "_name_or_path": "bench/synthetic-qwen2",
        }
        (out / "config.json").write_text(json.dumps(config, indent=2))
        gen = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "eos_token_id": [1, 2]}
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
        tok = self.base / "tokenizer.json"
        if out == self.base:
            tok.write_text(json.dumps(_tokenizer_json()))
        else:
            os.link(tok, out / "tokenizer.json")
        added = {str(i): {"content": f"<|reserved_{i}|>", "special": True} for i in range(256)}
        tok_cfg = {"chat_template": chat_template, "added_tokens_decoder": added}
        (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))


def _tokenizer_json() -> dict[str, object]:
    # About the size of Llama 3's tokenizer.json (~9 MB): 128k vocab, 100k merges.
    vocab = {f"tok{i:06d}": i for i in range(128_000)}
    merges = [f"tok{i:06d} tok{i + 1:06d}" for i in range(100_000)]
    return {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": merges}}


def variants(b: Builder) -> list[tuple[str, bool, Callable[[], Path]]]:
    """(label, should the fingerprint change?, build function) for each variant."""
    layer = LAYERS // 2
    one = f"model.layers.{layer}.mlp.down_proj.weight"

    def fine_tune(name: str, bits: np.ndarray) -> tuple[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
        noise = 0.002 * rng.standard_normal(bits.size, dtype=np.float32)
        return "BF16", f32_to_bf16(bf16_to_f32(bits) + noise)

    def one_tensor(name: str, bits: np.ndarray) -> tuple[str, np.ndarray] | None:
        if name != one:
            return None
        rng = np.random.default_rng(7)
        return "BF16", f32_to_bf16(0.02 * rng.standard_normal(bits.size, dtype=np.float32))

    def merged_lora(name: str, bits: np.ndarray) -> tuple[str, np.ndarray] | None:
        if not name.endswith(("q_proj.weight", "v_proj.weight")):
            return None
        out_dim = bits.size // b.specs[0].shape[1]
        in_dim = b.specs[0].shape[1]
        rng = np.random.default_rng(zlib.crc32(name.encode()) + 2)
        rank = 16
        lora_b = rng.standard_normal((out_dim, rank), dtype=np.float32)
        lora_a = rng.standard_normal((rank, in_dim), dtype=np.float32)
        delta = (lora_b @ lora_a) * np.float32(0.002 / math.sqrt(rank))
        return "BF16", f32_to_bf16(bf16_to_f32(bits) + delta.reshape(-1))

    def one_element(name: str, bits: np.ndarray) -> tuple[str, np.ndarray] | None:
        if name != one:
            return None
        edited = bits.copy()
        edited[np.random.default_rng(12345).integers(bits.size)] ^= np.uint16(1)
        return "BF16", edited

    def to_fp16(name: str, bits: np.ndarray) -> tuple[str, np.ndarray]:
        return "F16", bf16_to_f32(bits).astype(np.float16).view(np.uint16)

    def keep(name: str, bits: np.ndarray) -> None:
        return None

    resharded = [list(reversed(g)) for g in reversed(split(b.specs, RESHARDS))]
    new_template = CHAT_TEMPLATE.replace("<|im_start|>assistant", "<|im_start|>assistant\n")
    return [
        ("full fine-tune", True, lambda: b.variant("finetune", fine_tune)),
        ("one tensor replaced", True, lambda: b.variant("one_tensor", one_tensor)),
        ("merged LoRA (q,v)", True, lambda: b.variant("lora", merged_lora)),
        ("one element changed", True, lambda: b.variant("one_element", one_element)),
        ("chat template", True, lambda: b.variant("template", keep, chat_template=new_template)),
        ("bf16 -> fp16 cast", True, lambda: b.variant("fp16", to_fp16)),
        ("re-sharded (same)", False, lambda: b.variant("resharded", keep, groups=resharded)),
    ]
