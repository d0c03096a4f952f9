"""The model side of a request with prefix caching through the sidecar's KV hot tier.

run_request() is what a model server does per prompt: hash the prompt's full
blocks, look the chain up, read the matched blocks' K/V out of the pool, compute
only the tokens after them, write the new full blocks into allocated slots,
commit them, release the lease.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from infercache.v1 import kv_pb2 as pb
from infercache_client.fingerprint.api import fingerprint
from infercache_client.kv import HotTier, KvCacheClient, chain_hashes, kv_layout

from tests.support.kv_model.model import LayerKV, TinyCausalLM, TinyConfig, load_checkpoint

TOKENS_PER_BLOCK = 16
TENANT = "acme"


@dataclass(frozen=True)
class RequestResult:
    """Logits of the computed tokens and what the hot tier did for the request."""

    logits: torch.Tensor
    """[computed tokens, vocab]: only the tokens after the matched prefix."""
    matched_blocks: int
    promoted_blocks: int
    committed_blocks: int
    retry_later: bool


def model_fingerprint(root: Path) -> str:
    """The checkpoint's fingerprint (every byte hashed), as `infercache fingerprint` gives it."""
    return fingerprint(root, mode="full").value


def layout_for(cfg: TinyConfig) -> pb.KvLayout:
    """The KV layout the tiny model declares (float32 K/V, RoPE theta in the scope)."""
    return kv_layout(
        num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        tokens_per_block=TOKENS_PER_BLOCK,
        dtype=torch.float32,
        rope_config=f"theta={cfg.rope_theta}",
    )


def attach(client: KvCacheClient, root: Path, device: str, *, renew_leases: bool = True) -> HotTier:
    """Attach the checkpoint at `root` as a model process running on `device`."""
    cfg = TinyConfig.load(root / "config.json")
    return client.attach(
        model_fingerprint=model_fingerprint(root),
        layout=layout_for(cfg),
        device=device,
        process_name=f"tiny-{root.name}",
        renew_leases=renew_leases,
    )


def prompt(seed: int, length: int, vocab: int = 256) -> list[int]:
    """Deterministic random token ids."""
    gen = torch.Generator().manual_seed(seed)
    return [int(t) for t in torch.randint(0, vocab, (length,), generator=gen)]


def run_request(
    tier: HotTier,
    model: TinyCausalLM,
    tokens: list[int],
    device: str,
    *,
    tenant: str = TENANT,
    past_override: list[LayerKV] | None = None,
) -> RequestResult:
    """Serve one prompt with prefix reuse through the pool (see module docstring)."""
    tpb = TOKENS_PER_BLOCK
    hashes = chain_hashes(tokens, tpb)
    hit = tier.lookup_prefix(tenant, hashes)
    lease_id = hit.lease.lease_id if hit.lease is not None else ""
    try:
        start = hit.matched_blocks * tpb
        past = tier.pool.read_prefix(hit.slot_ids, device) if hit.matched_blocks else None
        ids = torch.tensor(tokens[start:], dtype=torch.long, device=device)
        logits, present = model(ids, past)
        new = len(hashes) - hit.matched_blocks
        committed = 0
        if new:
            alloc = tier.allocate(new, lease_id=lease_id)
            lease_id = alloc.lease.lease_id
            rows = new * tpb
            tier.pool.write_blocks(alloc.slot_ids, [(k[:rows], v[:rows]) for k, v in present])
            result = tier.commit(lease_id, tenant, alloc.slot_ids, hashes[hit.matched_blocks :])
            committed = result.committed_blocks
    finally:
        if lease_id:
            tier.release(lease_id)
    return RequestResult(
        logits, hit.matched_blocks, hit.promoted_blocks, committed, hit.retry_later
    )


def full_logits(model: TinyCausalLM, tokens: list[int], device: str) -> torch.Tensor:
    """Logits of every token, computed from scratch (the reference)."""
    logits: torch.Tensor = model(torch.tensor(tokens, dtype=torch.long, device=device))[0]
    return logits


def digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (to compare results across processes)."""
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def main() -> None:
    """`python -m tests.support.kv_model.serving TARGET CHECKPOINT DEVICE TOKENS_JSON`: one request.

    Prints a JSON line with the request's outcome; the process then exits, so the
    blocks it committed live on only in the sidecar's pool.
    """
    import sys

    target, root, device, tokens_json = sys.argv[1:5]
    model = load_checkpoint(Path(root), device)
    with KvCacheClient(target) as client:
        tier = attach(client, Path(root), device)
        res = run_request(tier, model, json.loads(tokens_json), device)
        tier.close()
    print(
        json.dumps(
            {
                "matched_blocks": res.matched_blocks,
                "committed_blocks": res.committed_blocks,
                "logits_sha256": digest(res.logits),
            }
        )
    )


if __name__ == "__main__":
    main()
