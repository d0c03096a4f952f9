"""A tiny causal transformer (Llama-shaped) for KV reuse tests: CPU or CUDA, float32.

Pre-norm blocks of grouped-query attention with rotary positions and a gated MLP.
`forward` takes per-layer past K/V of the first P tokens and computes only the
tokens after them, returning their logits and their own K/V (keys already rotated
at their absolute positions, which is what a prefix cache stores).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

LayerKV = tuple[Tensor, Tensor]
"""(K, V) of one layer, each [tokens, kv_heads, head_dim]."""

ARCHITECTURE = "TinyCausalLM"


@dataclass(frozen=True, slots=True)
class TinyConfig:
    """Shape of the model; saved as config.json next to model.safetensors."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    def save(self, path: Path) -> None:
        """Write config.json (HF style: architectures plus the fields)."""
        doc = {"architectures": [ARCHITECTURE], **asdict(self)}
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> TinyConfig:
        """Read config.json written by save()."""
        doc = json.loads(path.read_text())
        doc.pop("architectures", None)
        return cls(**doc)


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding of x [T, heads, head_dim] at absolute `positions` [T]."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angles = positions.to(torch.float64)[:, None] * freqs[None, :]
    cos = angles.cos().to(x.dtype)[:, None, :]
    sin = angles.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    """One pre-norm transformer layer: GQA self-attention with RoPE, then a SiLU-gated MLP."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.attn_norm = nn.Parameter(torch.ones(h))
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(h))
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)

    def forward(self, x: Tensor, positions: Tensor, past: LayerKV | None) -> tuple[Tensor, LayerKV]:
        """x [T, hidden] at `positions`; past K/V cover positions 0..P-1 (P = positions[0])."""
        cfg = self.cfg
        t = x.shape[0]
        a = _rms_norm(x, self.attn_norm, cfg.rms_eps)
        q = _rotate(self.q_proj(a).view(t, cfg.num_heads, cfg.head_dim), positions, cfg.rope_theta)
        k = _rotate(
            self.k_proj(a).view(t, cfg.num_kv_heads, cfg.head_dim), positions, cfg.rope_theta
        )
        v = self.v_proj(a).view(t, cfg.num_kv_heads, cfg.head_dim)
        keys, values = (
            (k, v) if past is None else (torch.cat((past[0], k)), torch.cat((past[1], v)))
        )
        group = cfg.num_heads // cfg.num_kv_heads
        keys_h = keys.repeat_interleave(group, dim=1)
        values_h = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, keys_h) / math.sqrt(cfg.head_dim)
        key_pos = torch.arange(keys.shape[0], device=x.device)
        future = key_pos[None, :] > positions[:, None]  # [T, S]: causal mask
        scores = scores.masked_fill(future[None], float("-inf"))
        attn = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), values_h)
        x = x + self.o_proj(attn.reshape(t, cfg.num_heads * cfg.head_dim))
        m = _rms_norm(x, self.mlp_norm, cfg.rms_eps)
        x = x + self.down_proj(nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))
        return x, (k, v)


class TinyCausalLM(nn.Module):
    """Embeddings, `num_layers` blocks, final norm, untied LM head."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @torch.no_grad()
    def forward(
        self, token_ids: Tensor, past: Sequence[LayerKV] | None = None
    ) -> tuple[Tensor, list[LayerKV]]:
        """Logits [T, vocab] of `token_ids` [T] and their per-layer K/V.

        `past` (one (K, V) per layer, each [P, kv_heads, head_dim]) stands for the P
        tokens before `token_ids`; only the new tokens are computed.
        """
        start = 0 if past is None else past[0][0].shape[0]
        positions = torch.arange(start, start + token_ids.shape[0], device=token_ids.device)
        x = self.embed(token_ids)
        present: list[LayerKV] = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, positions, None if past is None else past[i])
            present.append(kv)
        return self.lm_head(_rms_norm(x, self.norm, self.cfg.rms_eps)), present


def random_state(cfg: TinyConfig, seed: int) -> dict[str, Tensor]:
    """Weights drawn from N(0, 1/fan_in) (norms near 1) with a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    model = TinyCausalLM(cfg)
    state: dict[str, Tensor] = {}
    for name, p in model.state_dict().items():
        if p.dim() == 1:
            state[name] = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
        else:
            state[name] = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
    return state


def fine_tuned(state: dict[str, Tensor], seed: int, scale: float = 0.02) -> dict[str, Tensor]:
    """A weight update of `state`: every tensor nudged by relative noise of `scale`."""
    gen = torch.Generator().manual_seed(seed)
    return {n: t * (1.0 + scale * torch.randn(t.shape, generator=gen)) for n, t in state.items()}


def write_checkpoint(root: Path, cfg: TinyConfig, state: dict[str, Tensor]) -> Path:
    """Write config.json and model.safetensors under `root`; returns root."""
    root.mkdir(parents=True, exist_ok=True)
    cfg.save(root / "config.json")
    save_file({n: t.contiguous() for n, t in state.items()}, str(root / "model.safetensors"))
    return root


def load_checkpoint(root: Path, device: str | torch.device = "cpu") -> TinyCausalLM:
    """Load a checkpoint written by write_checkpoint, in eval mode on `device`."""
    model = TinyCausalLM(TinyConfig.load(root / "config.json"))
    model.load_state_dict(load_file(str(root / "model.safetensors")))
    return model.to(device).eval()
