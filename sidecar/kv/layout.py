"""The KV layout of one block and the scope that binds blocks to a model version.

A block's scope is everything that shapes its bytes: the weights (model
fingerprint), the adapter, the KV representation (dtype, block size, layout,
heads, tensor-parallel rank, RoPE/context config, quantisation scales) and the
tenant / cache salt. The sidecar prepends a digest of the scope to every block
hash a client sends, so two scopes never share a block whatever the client hashes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import NewType

from sidecar.errors import InvalidArgument

BlockKey = NewType("BlockKey", bytes)
"""Scope digest (32 bytes) followed by the client's block hash: the hot index's key."""

SCOPE_BYTES = 32
MAX_HASH_BYTES = 64
MAX_TEXT = 256
MAX_EXTRA = 32
# Generous caps that still keep one block far below the pool's own limits.
_MAX_DIM = {"num_layers": 1024, "num_kv_heads": 1024, "head_dim": 4096, "tokens_per_block": 4096}
MAX_BLOCK_BYTES = 1 << 30

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
SLOT_LAYOUTS = ("layer_kv_token_head_dim",)


@dataclass(frozen=True, slots=True)
class KvLayout:
    """One block's KV representation; every field is part of the block scope."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    tokens_per_block: int
    dtype: str
    tp_size: int = 1
    tp_rank: int = 0
    kv_scales_id: str = ""
    rope_config: str = ""
    slot_layout: str = "layer_kv_token_head_dim"
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def slot_shape(self) -> tuple[int, ...]:
        """[num_layers, 2 (K, V), tokens_per_block, num_kv_heads, head_dim]."""
        return (self.num_layers, 2, self.tokens_per_block, self.num_kv_heads, self.head_dim)

    @property
    def block_bytes(self) -> int:
        """Bytes one block occupies."""
        return math.prod(self.slot_shape) * DTYPE_SIZES[self.dtype]

    def canonical(self) -> bytes:
        """Deterministic serialisation (the layout's part of the scope)."""
        fields = {
            "num_layers": self.num_layers,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "tokens_per_block": self.tokens_per_block,
            "dtype": self.dtype,
            "tp_size": self.tp_size,
            "tp_rank": self.tp_rank,
            "kv_scales_id": self.kv_scales_id,
            "rope_config": self.rope_config,
            "slot_layout": self.slot_layout,
            "extra": [list(kv) for kv in self.extra],
        }
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def make_layout(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    tokens_per_block: int,
    dtype: str,
    tp_size: int = 0,
    tp_rank: int = 0,
    kv_scales_id: str = "",
    rope_config: str = "",
    slot_layout: str = "",
    extra: dict[str, str] | None = None,
) -> KvLayout:
    """Validate and canonicalise (tp_size 0 -> 1, empty slot_layout -> the default)."""
    dims = {
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "tokens_per_block": tokens_per_block,
    }
    for name, value in dims.items():
        if not 0 < value <= _MAX_DIM[name]:
            raise InvalidArgument(f"layout.{name}", f"must be in 1..{_MAX_DIM[name]}")
    if dtype not in DTYPE_SIZES:
        raise InvalidArgument("layout.dtype", f"must be one of {sorted(DTYPE_SIZES)}")
    tp_size = tp_size or 1
    if tp_size > 4096:
        raise InvalidArgument("layout.tp_size", "must be at most 4096")
    if tp_rank >= tp_size:
        raise InvalidArgument("layout.tp_rank", f"must be < tp_size ({tp_size})")
    slot_layout = slot_layout or SLOT_LAYOUTS[0]
    if slot_layout not in SLOT_LAYOUTS:
        raise InvalidArgument("layout.slot_layout", f"must be one of {SLOT_LAYOUTS}")
    for name, text in (("kv_scales_id", kv_scales_id), ("rope_config", rope_config)):
        if len(text) > MAX_TEXT:
            raise InvalidArgument(f"layout.{name}", f"longer than {MAX_TEXT} characters")
    pairs = tuple(sorted((extra or {}).items()))
    if len(pairs) > MAX_EXTRA:
        raise InvalidArgument("layout.extra", f"has more than {MAX_EXTRA} entries")
    for k, v in pairs:
        if len(k) > MAX_TEXT or len(v) > MAX_TEXT:
            raise InvalidArgument("layout.extra", f"entry {k[:40]!r} is too long")
    layout = KvLayout(
        num_layers,
        num_kv_heads,
        head_dim,
        tokens_per_block,
        dtype,
        tp_size,
        tp_rank,
        kv_scales_id,
        rope_config,
        slot_layout,
        pairs,
    )
    if layout.block_bytes > MAX_BLOCK_BYTES:
        raise InvalidArgument("layout", f"one block would take more than {MAX_BLOCK_BYTES} bytes")
    return layout


def _field(h: hashlib._Hash, text: str) -> None:
    raw = text.encode()
    h.update(len(raw).to_bytes(4, "big"))
    h.update(raw)


def version_scope(fingerprint: str, adapter: str, layout: KvLayout) -> bytes:
    """Digest of what an attachment fixes: weights, adapter and KV layout."""
    h = hashlib.sha256(b"infercache.kv.scope.v1\0")
    _field(h, fingerprint)
    _field(h, adapter)
    h.update(layout.canonical())
    return h.digest()


def request_scope(version: bytes, tenant: str, cache_salt: str) -> bytes:
    """Digest of a version scope narrowed to one tenant and cache salt (SCOPE_BYTES long)."""
    h = hashlib.sha256(b"infercache.kv.tenant.v1\0")
    h.update(version)
    _field(h, tenant)
    _field(h, cache_salt)
    return h.digest()


def version_tag(fingerprint: str) -> str:
    """Short stable name of a model version, used in warm-tier key names."""
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:32]
