"""The slot pool contract (bytes addressed by slot number) and an in-memory fake.

The real pools live in sidecar/kv/torch_pool.py, the only sidecar module that
imports torch; this module stays torch-free so the sidecar starts fast and the
domain logic is tested without it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SharedMemoryExport:
    """A pool in a file: map it with torch.from_file(path, shared=True, size=size_bytes)."""

    path: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class CudaIpcExport:
    """What torch's UntypedStorage._share_cuda_ returns, less the (per-process) device index."""

    gpu_uuid: str
    ipc_handle: bytes
    storage_size_bytes: int
    storage_offset_bytes: int
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes
    event_sync_required: bool


PoolLocation = SharedMemoryExport | CudaIpcExport


class SlotPool(Protocol):
    """N fixed-size slots of raw bytes, shared with model processes."""

    pool_id: str
    num_slots: int
    slot_bytes: int
    device: str
    """"cpu" or "cuda"."""

    def read_many(self, slots: Sequence[int], nbytes: int) -> Sequence[bytes | memoryview]:
        """The first nbytes of each slot: copies, or views that stay valid (and unchanged)
        only while the slots stay pinned."""
        ...

    def write(self, slot: int, data: bytes | memoryview) -> None:
        """Copy data to the start of a slot; visible to mappers when this returns."""
        ...

    def export(self, gpu_uuid: str) -> PoolLocation:
        """A handle a model process maps (CUDA: only for the GPU with this UUID)."""
        ...

    def close(self) -> None:
        """Release the pool (mappers keep their own mapping)."""
        ...


class MemorySlotPool:
    """A SlotPool in a private bytearray: for tests of the logic above the pool."""

    device = "memory"

    def __init__(self, num_slots: int, slot_bytes: int) -> None:
        self.pool_id = secrets.token_hex(8)
        self.num_slots = num_slots
        self.slot_bytes = slot_bytes
        self.buffer = bytearray(num_slots * slot_bytes)

    def read_many(self, slots: Sequence[int], nbytes: int) -> list[bytes]:
        """Copies of each slot's first nbytes."""
        view = memoryview(self.buffer)
        return [bytes(view[s * self.slot_bytes : s * self.slot_bytes + nbytes]) for s in slots]

    def write(self, slot: int, data: bytes | memoryview) -> None:
        """Copy into the slot."""
        start = slot * self.slot_bytes
        self.buffer[start : start + len(data)] = data

    def export(self, gpu_uuid: str) -> PoolLocation:
        """Not mappable by another process: a placeholder path."""
        return SharedMemoryExport(f"memory:{self.pool_id}", len(self.buffer))

    def close(self) -> None:
        """Nothing to release."""
