"""The client's pool mapping and typed K/V views, on a real shared-memory file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from infercache.v1 import kv_pb2 as pb
from infercache_client.kv import (
    KvPool,
    PoolUnavailable,
    chain_hashes,
    kv_layout,
    map_pool,
    torch_dtype,
)

LAYERS, HEADS, DIM, TOKENS = 2, 2, 4, 3
SHAPE = [LAYERS, 2, TOKENS, HEADS, DIM]


def pool_file(tmp_path: Path, num_slots: int, slot_bytes: int) -> pb.PoolHandle:
    """A zeroed pool file and the handle a sidecar would hand out for it (float32 blocks)."""
    path = tmp_path / "pool.bin"
    path.write_bytes(bytes(num_slots * slot_bytes))
    return pb.PoolHandle(
        pool_id="p1",
        num_slots=num_slots,
        slot_bytes=slot_bytes,
        block_bytes=LAYERS * 2 * TOKENS * HEADS * DIM * 4,
        dtype=pb.KV_DTYPE_FLOAT32,
        slot_shape=SHAPE,
        shared_memory=pb.SharedMemoryPool(path=str(path), size_bytes=num_slots * slot_bytes),
    )


def layer_kv(blocks: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random per-layer (K, V) for `blocks` blocks."""
    gen = torch.Generator().manual_seed(seed)
    shape = (blocks * TOKENS, HEADS, DIM)
    return [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))] * LAYERS


def test_two_mappings_share_the_same_bytes(tmp_path: Path) -> None:
    """A block written through one mapping is read back through another, in slot order."""
    handle = pool_file(tmp_path, num_slots=5, slot_bytes=LAYERS * 2 * TOKENS * HEADS * DIM * 4)
    writer, reader = map_pool(handle), map_pool(handle)
    kv = layer_kv(2, seed=1)
    writer.write_blocks([3, 1], kv)
    back = reader.read_prefix([3, 1])
    for (k, v), (k2, v2) in zip(kv, back, strict=True):
        assert torch.equal(k, k2)
        assert torch.equal(v, v2)
    assert torch.equal(reader.key(1, 0), kv[0][0][TOKENS:])
    assert torch.equal(reader.value(3, 1), kv[1][1][:TOKENS])
    assert not reader.slot(0).any(), "an unwritten slot changed"


def test_slot_padding_and_neighbours_stay_untouched(tmp_path: Path) -> None:
    """With slot_bytes > block_bytes a write fills only its own block bytes."""
    block_bytes = LAYERS * 2 * TOKENS * HEADS * DIM * 4
    handle = pool_file(tmp_path, num_slots=3, slot_bytes=block_bytes + 64)
    pool = map_pool(handle)
    pool.write_blocks([1], [(k + 1, v + 1) for k, v in layer_kv(1, seed=2)])
    data = bytearray((tmp_path / "pool.bin").read_bytes())  # what any other mapper sees
    raw = torch.frombuffer(data, dtype=torch.uint8).view(3, block_bytes + 64)
    assert not raw[0].any()
    assert not raw[2].any()
    assert not raw[1, block_bytes:].any()
    assert raw[1, :block_bytes].any()


def test_views_alias_and_read_prefix_copies(tmp_path: Path) -> None:
    """key()/value() write through to the pool; read_prefix() keeps its values afterwards."""
    pool = map_pool(pool_file(tmp_path, 2, LAYERS * 2 * TOKENS * HEADS * DIM * 4))
    pool.key(0, 1).fill_(7.0)
    copy = pool.read_prefix([0])
    assert bool((map_pool(pool_file_handle_again(tmp_path)).key(0, 1) == 7.0).all())
    pool.key(0, 1).fill_(0.0)
    assert bool((copy[1][0] == 7.0).all())


def pool_file_handle_again(tmp_path: Path) -> pb.PoolHandle:
    """The handle of the pool file already in tmp_path (2 exact-size slots)."""
    slot_bytes = LAYERS * 2 * TOKENS * HEADS * DIM * 4
    path = tmp_path / "pool.bin"
    return pb.PoolHandle(
        num_slots=2,
        slot_bytes=slot_bytes,
        block_bytes=slot_bytes,
        dtype=pb.KV_DTYPE_FLOAT32,
        slot_shape=SHAPE,
        shared_memory=pb.SharedMemoryPool(path=str(path), size_bytes=2 * slot_bytes),
    )


def test_write_blocks_rejects_wrong_shapes(tmp_path: Path) -> None:
    """K/V for the wrong number of layers or tokens is refused before anything is written."""
    pool = map_pool(pool_file(tmp_path, 2, LAYERS * 2 * TOKENS * HEADS * DIM * 4))
    with pytest.raises(ValueError, match="layers"):
        pool.write_blocks([0], layer_kv(1, seed=3)[:1])
    with pytest.raises(ValueError, match="shape"):
        pool.write_blocks([0, 1], layer_kv(1, seed=3))
    assert not pool.raw.any()


def test_handles_that_cannot_be_mapped(tmp_path: Path) -> None:
    """Wrong sizes, an unknown GPU or no location give PoolUnavailable, not a bad view."""
    good = pool_file(tmp_path, 2, LAYERS * 2 * TOKENS * HEADS * DIM * 4)
    bad_size = pb.PoolHandle()
    bad_size.CopyFrom(good)
    bad_size.shared_memory.size_bytes += 1
    bad_block = pb.PoolHandle()
    bad_block.CopyFrom(good)
    bad_block.block_bytes -= 4
    foreign_gpu = pb.PoolHandle()
    foreign_gpu.CopyFrom(good)
    foreign_gpu.cuda_ipc.CopyFrom(
        pb.CudaIpcPool(
            gpu_uuid="GPU-00000000-0000-0000-0000-000000000000", storage_size_bytes=1 << 20
        )
    )
    nowhere = pb.PoolHandle()
    nowhere.CopyFrom(good)
    nowhere.ClearField("shared_memory")
    for handle in (bad_size, bad_block, foreign_gpu, nowhere):
        with pytest.raises(PoolUnavailable):
            map_pool(handle)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_typed_views_for_each_dtype(dtype: torch.dtype) -> None:
    """A pool of `dtype` blocks round-trips K/V of that dtype; the layout names it."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    block_bytes = LAYERS * 2 * TOKENS * HEADS * DIM * itemsize
    pool = KvPool(torch.zeros(2, block_bytes, dtype=torch.uint8), dtype, SHAPE, block_bytes)
    kv = [(k.to(dtype), v.to(dtype)) for k, v in layer_kv(1, seed=4)]
    pool.write_blocks([1], kv)
    for (k, v), (k2, v2) in zip(kv, pool.read_prefix([1]), strict=True):
        assert torch.equal(k, k2)
        assert torch.equal(v, v2)
    layout = kv_layout(
        num_layers=LAYERS, num_kv_heads=HEADS, head_dim=DIM, tokens_per_block=TOKENS, dtype=dtype
    )
    assert torch_dtype(layout.dtype) == dtype


def test_chain_hashes_cover_whole_prefixes() -> None:
    """Hashes of full blocks only; block i's hash depends on every token before it."""
    tokens = list(range(50))
    hashes = chain_hashes(tokens, 16)
    assert len(hashes) == 3
    assert chain_hashes(tokens[:48], 16) == hashes
    changed = chain_hashes([999, *tokens[1:]], 16)
    assert all(a != b for a, b in zip(hashes, changed, strict=True))
    tail_changed = chain_hashes(tokens[:32] + [7] * 16, 16)
    assert tail_changed[:2] == hashes[:2]
    assert tail_changed[2] != hashes[2]
    assert chain_hashes(tokens, 16, parent=b"image") != hashes
    with pytest.raises(ValueError, match="tokens_per_block"):
        chain_hashes(tokens, 0)


def test_base_client_imports_without_torch() -> None:
    """`import infercache_client` (no kv extra needed) does not import torch."""
    code = "import sys, infercache_client; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
