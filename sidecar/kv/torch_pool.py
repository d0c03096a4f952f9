"""The KV slot pool in a torch tensor, shared with the model process.

This is the only sidecar module that imports torch, and it is imported lazily
(on the first AttachHotTier), so a sidecar without KV clients never pays for it.

One uint8 tensor of shape [num_slots, slot_bytes]:
- CPU: a file under /dev/shm created with torch.from_file(shared=True); the
  model process maps the same file the same way. The sidecar copies bytes in and
  out through a plain mmap of that file (a memcpy, no per-call torch overhead).
- CUDA: a device tensor exported through torch's CUDA IPC storage sharing
  (UntypedStorage._share_cuda_, what torch.multiprocessing.reductions uses); the
  model process rebuilds it with rebuild_cuda_tensor / _new_shared_cuda. GPUs are
  matched by UUID (indices differ per process with CUDA_VISIBLE_DEVICES), and the
  pool keeps the producer tensor alive for the sidecar's life, which outlives
  every attachment. Memory from expandable segments or a custom allocator does
  not export through this handle; the export then fails with FailedPrecondition.
"""

from __future__ import annotations

import mmap
import os
import secrets
from collections.abc import Sequence

import torch

from sidecar.errors import FailedPrecondition
from sidecar.kv.pool import CudaIpcExport, PoolLocation, SharedMemoryExport
from sidecar.kv.pool_files import POOL_PREFIX, create_locked


def _normalise_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class SharedMemorySlotPool:
    """The pool in a shared-memory file (CPU model processes)."""

    device = "cpu"

    def __init__(self, num_slots: int, slot_bytes: int, directory: str = "/dev/shm") -> None:
        self.pool_id = secrets.token_hex(8)
        self.num_slots = num_slots
        self.slot_bytes = slot_bytes
        self.size_bytes = num_slots * slot_bytes
        # Locked for the sidecar's life: the next start removes it only if we are gone.
        self._file = create_locked(directory, POOL_PREFIX, self.pool_id)
        self.path = self._file.path
        os.ftruncate(self._file.fd, self.size_bytes)
        # Maps the file; the model process maps it the same way.
        self.tensor = torch.from_file(
            self.path, shared=True, size=self.size_bytes, dtype=torch.uint8
        ).view(num_slots, slot_bytes)
        os.chmod(self.path, 0o600)
        with open(self.path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), self.size_bytes)
        self._view = memoryview(self._map)

    def read_many(self, slots: Sequence[int], nbytes: int) -> list[memoryview]:
        """Views of each slot's first nbytes (no copy; valid while the slots are pinned)."""
        size, view = self.slot_bytes, self._view
        return [view[s * size : s * size + nbytes] for s in slots]

    def write(self, slot: int, data: bytes | memoryview) -> None:
        """memcpy into the slot (MAP_SHARED: every mapper sees it at once)."""
        start = slot * self.slot_bytes
        self._view[start : start + len(data)] = data

    def export(self, gpu_uuid: str) -> PoolLocation:
        """The file's path and size."""
        return SharedMemoryExport(self.path, self.size_bytes)

    def close(self) -> None:
        """Unmap and unlink the file; processes that mapped it keep their mapping."""
        self._view.release()
        self._map.close()
        del self.tensor
        self._file.release()


class CudaSlotPool:
    """The pool in device memory, exported through CUDA IPC (GPU model processes).

    Untested on a GPU in this repository's CI; see docs/architecture.md.
    """

    device = "cuda"

    def __init__(self, num_slots: int, slot_bytes: int, device: str = "cuda") -> None:
        if not torch.cuda.is_available():
            raise FailedPrecondition("INFERCACHE_KV_DEVICE asks for CUDA but no GPU is visible")
        self.pool_id = secrets.token_hex(8)
        self.num_slots = num_slots
        self.slot_bytes = slot_bytes
        self._device = torch.device(device)
        index = self._device.index if self._device.index is not None else 0
        self._device = torch.device("cuda", index)
        self.gpu_uuid = _normalise_uuid(str(torch.cuda.get_device_properties(index).uuid))
        # Kept for the sidecar's life: consumers' mappings point into this allocation.
        self.tensor = torch.zeros((num_slots, slot_bytes), dtype=torch.uint8, device=self._device)
        torch.cuda.synchronize(self._device)

    def read_many(self, slots: Sequence[int], nbytes: int) -> list[bytes]:
        """Gather the slots on the device, then one device -> host copy."""
        if not slots:
            return []
        index = torch.tensor(list(slots), dtype=torch.long, device=self._device)
        gathered = self.tensor.index_select(0, index)[:, :nbytes].contiguous()
        staging = bytearray(len(slots) * nbytes)
        torch.frombuffer(staging, dtype=torch.uint8).copy_(gathered.view(-1))
        return [bytes(staging[i * nbytes : (i + 1) * nbytes]) for i in range(len(slots))]

    def write(self, slot: int, data: bytes | memoryview) -> None:
        """Host -> device copy, synchronised so a consumer reading after publish sees it."""
        staging = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.tensor[slot, : len(data)].copy_(staging)
        torch.cuda.synchronize(self._device)

    def export(self, gpu_uuid: str) -> PoolLocation:
        """A fresh IPC export (each consumer gets its own reference counter)."""
        if not gpu_uuid:
            raise FailedPrecondition(
                "the KV pool is on a GPU: AttachHotTier must name the model's gpu_uuid"
            )
        if _normalise_uuid(gpu_uuid) != self.gpu_uuid:
            raise FailedPrecondition(
                f"the KV pool is on GPU-{self.gpu_uuid}, the model process is on {gpu_uuid}; "
                "CUDA IPC needs both on the same GPU"
            )
        try:
            (
                _device,
                handle,
                size_bytes,
                offset_bytes,
                ref_counter_handle,
                ref_counter_offset,
                event_handle,
                event_sync_required,
            ) = self.tensor.untyped_storage()._share_cuda_()  # type: ignore[no-untyped-call]
        except RuntimeError as exc:
            raise FailedPrecondition(f"cannot export the KV pool through CUDA IPC: {exc}") from exc
        return CudaIpcExport(
            gpu_uuid="GPU-" + self.gpu_uuid,
            ipc_handle=bytes(handle),
            storage_size_bytes=int(size_bytes),
            storage_offset_bytes=int(offset_bytes),
            ref_counter_handle=bytes(ref_counter_handle),
            ref_counter_offset=int(ref_counter_offset),
            event_handle=bytes(event_handle or b""),
            event_sync_required=bool(event_sync_required),
        )

    def close(self) -> None:
        """Drop the sidecar's reference (torch frees it once consumers let go)."""
        del self.tensor


def create_pool(
    device: str, num_slots: int, slot_bytes: int, shm_dir: str
) -> SharedMemorySlotPool | CudaSlotPool:
    """A pool on "cpu" (shared-memory file) or "cuda[:N]"."""
    if device == "cpu":
        return SharedMemorySlotPool(num_slots, slot_bytes, shm_dir)
    return CudaSlotPool(num_slots, slot_bytes, device)
