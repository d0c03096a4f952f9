"""The sidecar's slot pool mapped into this process, with typed K/V views of its slots.

The pool is a uint8 tensor [num_slots, slot_bytes] in memory the sidecar owns: a
shared-memory file (torch.from_file(shared=True)) or a CUDA allocation rebuilt from
its IPC handle on the local GPU with the same UUID. A slot's first block_bytes bytes
hold one block as `dtype` in the layout [num_layers, 2 (K, V), tokens, kv_heads, head_dim].
Next to it, the slots' generations (one int64 per slot in host shared memory, when the
sidecar shares them) tell whether a slot was allocated again since a lookup. They are
mapped read-only (the file is opened O_RDONLY, the mapping is PROT_READ and exposed as a
read-only memoryview): the sidecar keeps the only writable mapping, so a model process
cannot forge the fence that tells it a slot was reused.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Sequence

import torch
from infercache.v1 import kv_pb2 as PB2
from torch.multiprocessing.reductions import rebuild_cuda_tensor

from infercache_client.kv.prefault import Prefaulter, slot_ranges

# Untyped in torch; this is the consumer half of torch's own CUDA tensor pickling.
_rebuild_cuda_tensor: Callable[..., torch.Tensor] = rebuild_cuda_tensor

LayerKV = tuple[torch.Tensor, torch.Tensor]
"""(K, V) of one layer, each [tokens, kv_heads, head_dim]."""

_DTYPES: dict[PB2.KvDtype, torch.dtype] = {
    PB2.KV_DTYPE_FLOAT32: torch.float32,
    PB2.KV_DTYPE_FLOAT16: torch.float16,
    PB2.KV_DTYPE_BFLOAT16: torch.bfloat16,
    PB2.KV_DTYPE_FLOAT8_E4M3FN: torch.float8_e4m3fn,
    PB2.KV_DTYPE_FLOAT8_E5M2: torch.float8_e5m2,
}


class PoolUnavailable(RuntimeError):
    """The pool handle cannot be mapped here (no GPU with its UUID, bad sizes, unknown kind)."""


def torch_dtype(dtype: PB2.KvDtype) -> torch.dtype:
    """The torch dtype of a KvDtype; ValueError for UNSPECIFIED or unknown values."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"no torch dtype for KvDtype {dtype}") from None


def kv_dtype(dtype: torch.dtype) -> PB2.KvDtype:
    """The KvDtype of a torch dtype; ValueError if the pool cannot hold it."""
    for value, candidate in _DTYPES.items():
        if candidate == dtype:
            return value
    raise ValueError(f"KV dtype {dtype} is not supported")


def kv_layout(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    tokens_per_block: int,
    dtype: torch.dtype,
    rope_config: str = "",
    tp_size: int = 1,
    tp_rank: int = 0,
    kv_scales_id: str = "",
    extra: dict[str, str] | None = None,
) -> PB2.KvLayout:
    """A KvLayout for AttachHotTier; every field is part of the blocks' scope."""
    return PB2.KvLayout(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        tokens_per_block=tokens_per_block,
        dtype=kv_dtype(dtype),
        tp_size=tp_size,
        tp_rank=tp_rank,
        kv_scales_id=kv_scales_id,
        rope_config=rope_config,
        slot_layout=PB2.KV_SLOT_LAYOUT_LAYER_KV_TOKEN_HEAD_DIM,
        extra=extra or {},
    )


def _bare_uuid(uuid: str) -> str:
    return uuid.lower().removeprefix("gpu-")


def device_uuid(device: torch.device | str | int) -> str:
    """The UUID of a CUDA device as nvidia-smi prints it ("GPU-...")."""
    index = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    props = torch.cuda.get_device_properties(index)
    return "GPU-" + str(props.uuid)


def _local_index(gpu_uuid: str) -> int:
    """Index of the visible GPU with this UUID; indices differ between processes, UUIDs do not."""
    want = _bare_uuid(gpu_uuid)
    for index in range(torch.cuda.device_count()):
        if _bare_uuid(device_uuid(index)) == want:
            return index
    raise PoolUnavailable(f"no visible GPU has UUID {gpu_uuid}; the pool lives on another GPU")


def _map_shared_memory(handle: PB2.PoolHandle) -> torch.Tensor:
    shm = handle.shared_memory
    if shm.size_bytes != handle.num_slots * handle.slot_bytes:
        raise PoolUnavailable(
            f"pool file size {shm.size_bytes} != {handle.num_slots} slots x {handle.slot_bytes} B"
        )
    raw = torch.from_file(shm.path, shared=True, size=shm.size_bytes, dtype=torch.uint8)
    return raw.view(handle.num_slots, handle.slot_bytes)


def _map_cuda_ipc(handle: PB2.PoolHandle) -> torch.Tensor:
    ipc = handle.cuda_ipc
    if ipc.storage_size_bytes < handle.num_slots * handle.slot_bytes:
        raise PoolUnavailable(
            f"pool storage {ipc.storage_size_bytes} B < {handle.num_slots} x {handle.slot_bytes} B"
        )
    index = _local_index(ipc.gpu_uuid)
    return _rebuild_cuda_tensor(
        torch.Tensor,
        (handle.num_slots, handle.slot_bytes),
        (handle.slot_bytes, 1),
        0,
        torch.UntypedStorage,
        torch.uint8,
        index,
        ipc.ipc_handle,
        ipc.storage_size_bytes,
        ipc.storage_offset_bytes,
        False,
        ipc.ref_counter_handle,
        ipc.ref_counter_offset,
        ipc.event_handle or None,
        ipc.event_sync_required,
    )


def map_pool(handle: PB2.PoolHandle) -> KvPool:
    """Map a PoolHandle from AttachHotTier; PoolUnavailable when it cannot be mapped here."""
    kind = handle.WhichOneof("location")
    if kind == "shared_memory":
        raw = _map_shared_memory(handle)
    elif kind == "cuda_ipc":
        raw = _map_cuda_ipc(handle)
    else:
        raise PoolUnavailable(f"unknown pool location {kind!r}")
    generations = _map_generations(handle) if handle.HasField("generations") else None
    prefaulter = Prefaulter(raw.data_ptr(), raw.numel()) if kind == "shared_memory" else None
    return KvPool(
        raw,
        torch_dtype(handle.dtype),
        tuple(handle.slot_shape),
        handle.block_bytes,
        generations,
        prefaulter,
    )


def _map_generations(handle: PB2.PoolHandle) -> memoryview:
    gen = handle.generations
    if gen.size_bytes != 8 * handle.num_slots:
        raise PoolUnavailable(
            f"generations file size {gen.size_bytes} != 8 x {handle.num_slots} slots"
        )
    return map_generations(gen.path, handle.num_slots)


def map_generations(path: str, num_slots: int) -> memoryview:
    """The generations file mapped read-only: num_slots int64 (uint64 on the sidecar's
    side; values stay far below 2**63). A write through the view raises TypeError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size < 8 * num_slots:
            raise PoolUnavailable(f"generations file {path} is shorter than {num_slots} slots")
        mapped = mmap.mmap(fd, 8 * num_slots, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)  # the mapping keeps the file
    return memoryview(mapped).cast("q")


class KvPool:
    """Typed views of a mapped pool. Views alias the sidecar's memory: writes are in place."""

    def __init__(
        self,
        raw: torch.Tensor,
        dtype: torch.dtype,
        slot_shape: Sequence[int],
        block_bytes: int,
        generations: memoryview | None = None,
        prefaulter: Prefaulter | None = None,
    ) -> None:
        """`raw` is the uint8 pool [num_slots, slot_bytes]; `slot_shape` is [L, 2, T, H, D];
        `generations` the slots' int64 generations, a read-only view of num_slots items
        (None: not shared); `prefaulter`: maps slots ahead of writes (a shared-memory
        pool; None: nothing to do)."""
        if len(slot_shape) != 5 or slot_shape[1] != 2:
            raise PoolUnavailable(f"slot shape {list(slot_shape)} is not [layers, 2, T, H, D]")
        itemsize = torch.empty((), dtype=dtype).element_size()
        if math.prod(slot_shape) * itemsize != block_bytes or block_bytes > raw.shape[1]:
            raise PoolUnavailable(
                f"block of {list(slot_shape)} x {itemsize} B does not fit "
                f"block_bytes={block_bytes}, slot_bytes={raw.shape[1]}"
            )
        if raw.shape[1] % itemsize:
            raise PoolUnavailable(f"slot_bytes {raw.shape[1]} is not a multiple of {itemsize}")
        if generations is not None and len(generations) != raw.shape[0]:
            raise PoolUnavailable(f"{len(generations)} generations for {raw.shape[0]} slots")
        self.raw = raw
        self.generations = generations
        self._prefaulter = prefaulter
        self._block_bytes = block_bytes
        self.dtype = dtype
        self.slot_shape = tuple(slot_shape)
        # [num_slots, L, 2, T, H, D]; slot padding beyond block_bytes is sliced off.
        self.blocks = raw[:, :block_bytes].view(dtype).view(raw.shape[0], *slot_shape)

    @property
    def num_slots(self) -> int:
        """Number of slots in the pool."""
        return int(self.raw.shape[0])

    @property
    def tokens_per_block(self) -> int:
        """Tokens one slot holds."""
        return self.slot_shape[2]

    @property
    def device(self) -> torch.device:
        """Where the pool memory lives (cpu for a shared-memory file)."""
        return self.raw.device

    @property
    def fenced(self) -> bool:
        """Whether slot generations can be checked (see changed)."""
        return self.generations is not None

    def changed(self, slot_ids: Sequence[int], generations: Sequence[int]) -> tuple[int, ...]:
        """Positions i where slot_ids[i] is no longer at generations[i] (it was allocated
        again: its bytes may have changed since). () when not fenced."""
        if self.generations is None or not slot_ids:
            return ()
        if len(generations) != len(slot_ids):
            raise ValueError(f"{len(slot_ids)} slots but {len(generations)} generations")
        view = self.generations
        now = [view[s] for s in slot_ids]
        return tuple(i for i, (a, b) in enumerate(zip(now, generations, strict=True)) if a != b)

    def prefault(self, slot_ids: Sequence[int]) -> bool:
        """Map the slots into this process before they are written (prefault.py), off
        the thread that will copy; False when the pages cannot be had (do not write)."""
        if self._prefaulter is None or not slot_ids:
            return True
        ranges = slot_ranges(slot_ids, int(self.raw.shape[1]), self._block_bytes)
        return self._prefaulter.populate(ranges)

    def slot(self, slot_id: int) -> torch.Tensor:
        """One block [num_layers, 2, tokens, kv_heads, head_dim] (a view)."""
        return self.blocks[slot_id]

    def key(self, slot_id: int, layer: int) -> torch.Tensor:
        """K of one layer of a block [tokens, kv_heads, head_dim] (a view)."""
        return self.blocks[slot_id, layer, 0]

    def value(self, slot_id: int, layer: int) -> torch.Tensor:
        """V of one layer of a block [tokens, kv_heads, head_dim] (a view)."""
        return self.blocks[slot_id, layer, 1]

    def read_prefix(
        self, slot_ids: Sequence[int], device: torch.device | str | None = None
    ) -> list[LayerKV]:
        """Per layer, (K, V) of the blocks in order, each [n * tokens, kv_heads, head_dim].

        A copy on `device` (default: the pool's), so later eviction cannot change it.
        """
        index = torch.tensor(list(slot_ids), dtype=torch.long, device=self.device)
        picked = self.blocks.index_select(0, index)  # [n, L, 2, T, H, D]
        if device is not None:
            picked = picked.to(device)
        n, layers, _, tokens, heads, dim = picked.shape
        kv = picked.permute(1, 2, 0, 3, 4, 5).reshape(layers, 2, n * tokens, heads, dim)
        return [(kv[layer, 0], kv[layer, 1]) for layer in range(layers)]

    def write_blocks(self, slot_ids: Sequence[int], kv: Sequence[LayerKV]) -> None:
        """Write per-layer (K, V) of len(slot_ids) * tokens tokens into the slots, in order.

        On CUDA the copies are queued on the current stream; call synchronize() before
        committing the slots (HotTier.commit does).
        """
        layers, _, tokens, heads, dim = self.slot_shape
        if len(kv) != layers:
            raise ValueError(f"got K/V for {len(kv)} layers, the layout has {layers}")
        want = (len(slot_ids) * tokens, heads, dim)
        for layer, (k, v) in enumerate(kv):
            if tuple(k.shape) != want or tuple(v.shape) != want:
                raise ValueError(f"layer {layer}: K/V shape {tuple(k.shape)}, expected {want}")
        stacked = torch.stack([torch.stack(pair) for pair in kv])  # [L, 2, n * T, H, D]
        stacked = stacked.view(layers, 2, len(slot_ids), tokens, heads, dim)
        index = torch.tensor(list(slot_ids), dtype=torch.long, device=self.device)
        src = stacked.permute(2, 0, 1, 3, 4, 5).to(device=self.device, dtype=self.dtype)
        self.blocks.index_copy_(0, index, src)

    def synchronize(self) -> None:
        """Wait until queued writes to a CUDA pool are done (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
