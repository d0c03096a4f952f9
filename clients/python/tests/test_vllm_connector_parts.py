"""The vLLM connector's pure parts (no vLLM needed): settings, chain seeds, paged copies.

The connector inside real vLLM engines is tested in tests/vllm (make test-vllm)."""

from __future__ import annotations

import math

import pytest
import torch
from infercache_client.kv import KvPool
from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.config import ConfigError, ConnectorConfig
from infercache_client.vllm.paged import (
    UnknownLayout,
    detect_layout,
    load_blocks,
    runs,
    save_blocks,
)

LAYERS, HEADS, DIM, TOKENS = 2, 2, 4, 3


def test_config_defaults_and_parsing() -> None:
    assert ConnectorConfig.from_extra(None) == ConnectorConfig()
    cfg = ConnectorConfig.from_extra({"sidecar": "unix:/run/ic.sock", "lookup_timeout_s": 0.05})
    assert cfg.sidecar == "unix:/run/ic.sock"
    assert cfg.lookup_timeout_s == 0.05
    assert cfg.tenant == "vllm"
    assert cfg.domain_key_file == ""
    keyed = ConnectorConfig.from_extra({"tenant": "acme", "domain_key_file": "/run/k/acme.key"})
    assert (keyed.tenant, keyed.domain_key_file) == ("acme", "/run/k/acme.key")


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"sidcar": "x"}, "unknown kv_connector_extra_config keys: sidcar"),
        ({"sidecar": ""}, "sidecar"),
        ({"tenant": 7}, "tenant"),
        ({"tenant": "t" * 257}, "tenant"),
        ({"lookup_timeout_s": 0}, "lookup_timeout_s"),
        ({"lookup_timeout_s": math.inf}, "lookup_timeout_s"),
        ({"retry_s": True}, "retry_s"),
        ({"rpc_timeout_s": "2"}, "rpc_timeout_s"),
        ({"fingerprint_mode": "quick"}, "fingerprint_mode"),
    ],
)
def test_config_refuses_bad_values_by_name(extra: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        ConnectorConfig.from_extra(extra)


def test_chain_seed_separates_adapter_salt_and_never_merges_fields() -> None:
    tokens = list(range(100))
    plain = request_chain(tokens, 32, ChainScope(), 64)
    assert len(plain) == 3
    assert request_chain(tokens, 32, ChainScope(), 64) == plain
    others = [
        ChainScope(cache_salt="alice"),
        ChainScope(cache_salt="bob"),
        ChainScope("lora-a", "fp-a"),
        ChainScope("lora-a", "fp-b"),  # same name, other files
        ChainScope("lora-b", "fp-a"),
        ChainScope("lora-a", "fp-a", "alice"),
        ChainScope("a", "", "b"),  # field boundaries are length-prefixed:
        ChainScope("", "a", "b"),  # these three never share a seed
        ChainScope("", "", "ab"),
    ]
    chains = [request_chain(tokens, 32, s, 64) for s in others]
    firsts = {c[0] for c in chains} | {plain[0]}
    assert len(firsts) == len(others) + 1, "every scope starts its own chain"
    assert request_chain(tokens, 32, ChainScope(), 2) == plain[:2]
    assert request_chain(tokens[:31], 32, ChainScope(), 64) == []


def _pool(num_slots: int) -> KvPool:
    shape = (LAYERS, 2, TOKENS, HEADS, DIM)
    block_bytes = math.prod(shape) * 4
    raw = torch.zeros(num_slots, block_bytes, dtype=torch.uint8)
    return KvPool(raw, torch.float32, shape, block_bytes)


def _cpu_layer(num_blocks: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_blocks, HEADS, TOKENS, 2 * DIM, generator=gen)


def test_cpu_layout_round_trip_and_slot_order() -> None:
    layers = [_cpu_layer(6, seed) for seed in range(LAYERS)]
    layout = detect_layout(layers[0], block_size=TOKENS, num_kv_heads=HEADS, head_dim=DIM)
    assert layout.kind == "cpu"
    pool = _pool(4)
    save_blocks(layout, layers, pool, [5, 1], [2, 0])
    # The CPU backend's split: per head, the block's K rows then its V rows.
    k_of_block5 = layers[1][5].reshape(HEADS, 2 * TOKENS, DIM)[:, :TOKENS]
    assert torch.equal(pool.key(2, 1), k_of_block5.permute(1, 0, 2))
    v_of_block1 = layers[0][1].reshape(HEADS, 2 * TOKENS, DIM)[:, TOKENS:]
    assert torch.equal(pool.value(0, 0), v_of_block1.permute(1, 0, 2))
    fresh = [torch.zeros_like(kv) for kv in layers]
    load_blocks(layout, fresh, pool, [2, 0], [3, 4])
    for before, after in zip(layers, fresh, strict=True):
        assert torch.equal(after[3], before[5])
        assert torch.equal(after[4], before[1])
        assert not after[[0, 1, 2, 5]].any(), "no other block written"


def test_flash_layout_round_trip() -> None:
    gen = torch.Generator().manual_seed(3)
    layers = [torch.randn(2, 5, TOKENS, HEADS, DIM, generator=gen) for _ in range(LAYERS)]
    layout = detect_layout(layers[0], block_size=TOKENS, num_kv_heads=HEADS, head_dim=DIM)
    assert layout.kind == "flash"
    pool = _pool(3)
    save_blocks(layout, layers, pool, [4], [1])
    assert torch.equal(pool.key(1, 0), layers[0][0, 4])
    assert torch.equal(pool.value(1, 1), layers[1][1, 4])
    fresh = [torch.zeros_like(kv) for kv in layers]
    load_blocks(layout, fresh, pool, [1], [0])
    assert all(torch.equal(f[:, 0], kv[:, 4]) for f, kv in zip(fresh, layers, strict=True))


def test_runs_group_consecutive_slots_and_blocks() -> None:
    assert runs([], []) == []
    assert runs([7, 8, 9], [2, 3, 4]) == [(7, 2, 3)]
    # A run breaks where either side jumps (or goes backwards).
    assert runs([3, 4, 5, 0, 7, 6], [0, 1, 2, 5, 6, 7]) == [
        (3, 0, 3),
        (0, 5, 1),
        (7, 6, 1),
        (6, 7, 1),
    ]
    assert runs([1, 2], [4, 6]) == [(1, 4, 1), (2, 6, 1)]


@pytest.mark.parametrize("kind", ["cpu", "flash"])
def test_load_of_runs_and_scattered_blocks_writes_exactly_the_saved_blocks(kind: str) -> None:
    """Guard of the run-wise copy: a mapping with runs of several blocks, single blocks
    and a reversed pair loads every block as saved, and writes no other block."""
    gen = torch.Generator().manual_seed(9)
    if kind == "cpu":
        layers = [torch.randn(10, HEADS, TOKENS, 2 * DIM, generator=gen) for _ in range(LAYERS)]
    else:
        layers = [torch.randn(2, 10, TOKENS, HEADS, DIM, generator=gen) for _ in range(LAYERS)]
    layout = detect_layout(layers[0], block_size=TOKENS, num_kv_heads=HEADS, head_dim=DIM)
    pool = _pool(8)
    saved_blocks, slots = [0, 1, 2, 3, 4, 5], [3, 4, 5, 0, 7, 6]
    save_blocks(layout, layers, pool, saved_blocks, slots)
    assert not pool.blocks[[1, 2]].any(), "the save (run-wise too) wrote no other slot"
    fresh = [torch.zeros_like(kv) for kv in layers]
    targets = [2, 3, 4, 8, 1, 0]
    load_blocks(layout, fresh, pool, slots, targets)
    axis = 0 if kind == "cpu" else 1
    for before, after in zip(layers, fresh, strict=True):
        for src, dst in zip(saved_blocks, targets, strict=True):
            assert torch.equal(after.select(axis, dst), before.select(axis, src))
        untouched = [b for b in range(10) if b not in targets]
        assert not after.index_select(axis, torch.tensor(untouched)).any()


@pytest.mark.parametrize(
    "shape", [(6, HEADS, TOKENS, DIM), (6, HEADS + 1, TOKENS, 2 * DIM), (3, 6, TOKENS, HEADS, DIM)]
)
def test_unknown_paged_layout_is_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(UnknownLayout):
        detect_layout(torch.zeros(shape), block_size=TOKENS, num_kv_heads=HEADS, head_dim=DIM)
