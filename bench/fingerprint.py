#!/usr/bin/env python3
"""Model fingerprint benchmark (issue 4): what each method detects, and what it costs.

Builds a synthetic checkpoint in a temp dir (default ~1 GiB, 999 tensors: 83
Qwen2-style layers of 12 tensors plus embedding, final norm and lm_head, bf16,
five shards with an index, a ~9 MB tokenizer.json), then variants of it:

    full fine-tune, one tensor replaced, merged LoRA (rank-16 delta on q/v of every
    layer), one element changed, chat template changed, bf16 -> fp16 cast, and the
    identical weights re-sharded into three shards in another order.

Methods compared: "8KB-header" (BLAKE3 of config.json + the first 8 KiB of the
first two shards: what hashing "the file header" amounts to), fingerprint fast
mode, fingerprint full mode (no memo). It prints which method notices which
variant, each method's time with a warm page cache and, when the page cache can be
emptied (/proc/sys/vm/drop_caches, else posix_fadvise DONTNEED, checked with
mincore), cold; and full mode's throughput against a plain sequential read of the
same shards. The last line holds key=value pairs.

    .venv/bin/python bench/fingerprint.py --quick      # ~128 MiB
    .venv/bin/python bench/fingerprint.py              # ~1 GiB
    .venv/bin/python bench/fingerprint.py --size 4GiB

This file builds its own checkpoints (it must not import tests/).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import mmap
import os
import re
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from blake3 import blake3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sidecar.fingerprint import fingerprint

LAYERS = 83
SHARDS = 5
RESHARDS = 3
READ_CHUNK = 16 << 20
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class Stored:
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
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
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


# ---------------------------------------------------------------- methods and timing


def header_8kb(path: Path) -> str:
    """The naive method: config.json plus the first 8 KiB of the first two shards."""
    h = blake3((path / "config.json").read_bytes())
    for shard in sorted(path.glob("*.safetensors"))[:2]:
        with open(shard, "rb") as f:
            h.update(f.read(8192))
    return h.hexdigest()


METHODS: dict[str, Callable[[Path], str]] = {
    "8KB-header": header_8kb,
    "fast": lambda p: fingerprint(p, mode="fast").value,
    "full": lambda p: fingerprint(p, mode="full").value,
}


def plain_read(path: Path) -> str:
    """Sequential single-threaded read of every shard (the throughput baseline)."""
    buf = memoryview(bytearray(READ_CHUNK))
    total = 0
    for shard in sorted(path.glob("*.safetensors")):
        fd = os.open(shard, os.O_RDONLY)
        try:
            while n := os.readv(fd, [buf]):
                total += n
        finally:
            os.close(fd)
    return str(total)


def hash_ceiling(nbytes: int, threads: int) -> float:
    """Seconds BLAKE3 needs for `nbytes` already in memory on `threads` threads (no I/O)."""
    chunk = memoryview(np.random.default_rng(0).integers(0, 255, 1 << 20, np.uint8).tobytes())
    per = max(1, nbytes // threads // len(chunk))

    def work(_: int) -> None:
        h = blake3()
        for _ in range(per):
            h.update(chunk)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    return (time.perf_counter() - start) * nbytes / (per * threads * len(chunk))


def warm_times(fns: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Warm samples per method, taken round-robin so that a burst of load from other
    processes hits every method alike (their ratios stay meaningful on a shared box)."""
    inner = {m: 10 if m in ("8KB-header", "fast") else 1 for m in fns}
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {m: [] for m in fns}
    for _ in range(rounds):
        for m, fn in fns.items():
            for _ in range(inner[m]):
                start = time.perf_counter()
                fn()
                samples[m].append(time.perf_counter() - start)
    return samples


class Evictor:
    """Empties the page cache for a directory's files, and checks that it worked."""

    def __init__(self) -> None:
        self.how = "n/a"
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

    def evict(self, root: Path) -> bool:
        files = [p for p in root.iterdir() if p.is_file()]
        for how in ("drop_caches", "fadvise"):
            with contextlib.suppress(OSError):
                if how == "drop_caches":
                    os.sync()
                    Path("/proc/sys/vm/drop_caches").write_text("1\n")
                else:
                    for p in files:
                        fd = os.open(p, os.O_RDONLY)
                        try:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        finally:
                            os.close(fd)
                if max(self.resident(p) for p in files) < 0.02:
                    self.how = how
                    return True
        self.how = "n/a"
        return False

    def resident(self, path: Path) -> float:
        """Fraction of the file's pages in the page cache (mincore)."""
        size = path.stat().st_size
        if size == 0:
            return 0.0
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = self._libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                raise OSError(ctypes.get_errno(), "mmap")
            try:
                pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
                vec = (ctypes.c_ubyte * pages)()
                if self._libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore")
                return sum(v & 1 for v in bytes(vec)) / pages
            finally:
                self._libc.munmap(addr, size)
        finally:
            os.close(fd)


def cold_times(
    fns: Mapping[str, Callable[[], object]], root: Path, evictor: Evictor, repeat: int
) -> dict[str, float | None]:
    """Median time per method right after emptying the page cache (None if it can't be
    emptied); round-robin over methods, like warm_times."""
    samples: dict[str, list[float]] = {m: [] for m in fns}
    for _ in range(repeat):
        for m, fn in fns.items():
            if not evictor.evict(root):
                return dict.fromkeys(fns)
            start = time.perf_counter()
            fn()
            samples[m].append(time.perf_counter() - start)
    return {m: statistics.median(v) for m, v in samples.items()}


# ---------------------------------------------------------------- main


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|KB|MB|GB)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1GiB, 512MiB)")
    unit = {
        "KiB": 1 << 10,
        "MiB": 1 << 20,
        "GiB": 1 << 30,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        None: 1,
    }[m.group(2)]
    return int(float(m.group(1)) * unit)


@contextlib.contextmanager
def workdir(keep: bool, parent: str | None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="infercache-fp-bench-", dir=parent))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def bind(fn: Callable[[Path], str], path: Path) -> Callable[[], str]:
    return lambda: fn(path)


def fmt_ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GiB"))
    parser.add_argument("--quick", action="store_true", help="~128 MiB, fewer repeats")
    parser.add_argument("--dir", help="parent directory for the temporary checkpoints")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints")
    args = parser.parse_args(argv)
    size = parse_size("128MiB") if args.quick else args.size
    cold_repeat = 1 if args.quick else 3
    cpus = os.cpu_count() or 1

    with workdir(args.keep, args.dir) as root:
        builder = Builder(root, size)
        t0 = time.perf_counter()
        base = builder.write_base()
        built = [(label, change, build()) for label, change, build in variants(builder)]
        shard_bytes = sum(p.stat().st_size for p in base.glob("*.safetensors"))
        print(
            f"checkpoint: {len(builder.specs)} tensors, {shard_bytes / 2**30:.2f} GiB in "
            f"{SHARDS} shards; {len(built)} variants built in {time.perf_counter() - t0:.1f} s; "
            f"{cpus} CPUs"
        )

        reference = {m: fn(base) for m, fn in METHODS.items()}
        rows = []
        for label, should_change, path in built:
            rows.append(
                (label, should_change, {m: fn(path) != reference[m] for m, fn in METHODS.items()})
            )

        print()
        print(f"{'variant':<22} {'expect':<8} " + " ".join(f"{m:>11}" for m in METHODS))
        for label, should_change, changed in rows:
            cells = []
            for m in METHODS:
                ok = changed[m] == should_change
                cells.append(f"{('changed' if changed[m] else 'same') + ('' if ok else ' !'):>11}")
            print(f"{label:<22} {'change' if should_change else 'same':<8} " + " ".join(cells))

        evictor = Evictor()
        runs = {m: bind(fn, base) for m, fn in {**METHODS, "plain read": plain_read}.items()}
        warm = warm_times(runs, 3 if args.quick else 7)
        cold = cold_times(runs, base, evictor, cold_repeat)
        timings = {m: (statistics.median(warm[m]), cold[m]) for m in runs}
        best = {m: min(v) for m, v in warm.items()}
        ceiling = statistics.median(hash_ceiling(shard_bytes, cpus) for _ in range(3))

        print()
        head = ("warm ms", "best ms", "cold ms", "warm GB/s", "cold GB/s")
        print(f"{'method':<12} " + " ".join(f"{h:>10}" for h in head))
        for m, (warm_s, cold_s) in timings.items():
            rates = ["", ""]
            if m in ("full", "plain read"):
                rates = [
                    "" if t is None else f"{shard_bytes / t / 1e9:.2f}" for t in (warm_s, cold_s)
                ]
            cells = [fmt_ms(warm_s), fmt_ms(best[m]), fmt_ms(cold_s), *rates]
            print(f"{m:<12} " + " ".join(f"{c:>10}" for c in cells))
        print(
            "warm = median of interleaved runs, best = fastest of them, "
            f"cold = median of {cold_repeat}"
        )
        rate = shard_bytes / ceiling / 1e9
        print(f"BLAKE3 alone on {cpus} threads, data in memory: {rate:.2f} GB/s")
        print(f"cold cache via: {evictor.how}")

        must = [r for r in rows if r[1]]
        detects = {m: sum(r[2][m] for r in must) for m in METHODS}
        stable = {m: all(not r[2][m] for r in rows if not r[1]) for m in METHODS}
        full_warm, full_cold = timings["full"]
        read_warm, read_cold = timings["plain read"]
        ratio_cold = (
            "n/a" if full_cold is None or read_cold is None else f"{read_cold / full_cold:.2f}"
        )
        pairs = {
            "size_gib": f"{shard_bytes / 2**30:.2f}",
            "tensors": len(builder.specs),
            "cpus": cpus,
            "header8k_detects": f"{detects['8KB-header']}/{len(must)}",
            "fast_detects": f"{detects['fast']}/{len(must)}",
            "full_detects": f"{detects['full']}/{len(must)}",
            "reshard_stable": "yes" if stable["fast"] and stable["full"] else "no",
            "fast_ms_warm": f"{timings['fast'][0] * 1e3:.2f}",
            "fast_ms_warm_best": f"{best['fast'] * 1e3:.2f}",
            "fast_ms_cold": fmt_ms(timings["fast"][1]).replace(",", ""),
            "full_ms_warm": f"{full_warm * 1e3:.0f}",
            "full_gbps_warm": f"{shard_bytes / full_warm / 1e9:.2f}",
            "read_gbps_warm": f"{shard_bytes / read_warm / 1e9:.2f}",
            "full_vs_read": f"{read_warm / full_warm:.2f}",
            "full_vs_read_cold": ratio_cold,
            "hash_ceiling_vs_read": f"{read_warm / ceiling:.2f}",
            "cold": evictor.how,
            "load1": f"{os.getloadavg()[0]:.1f}",
        }
        print()
        print(" ".join(f"{k}={v}" for k, v in pairs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
