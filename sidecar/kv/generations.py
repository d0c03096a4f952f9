"""Slot generations: the fence that makes a read racing a slot's reuse detectable.

Every allocation of a slot (a fresh writer, a promotion, an eviction's reuse) bumps
its generation before anyone can write to it, and LookupPrefix answers each slot
with its generation. A model process that copies out of a slot asynchronously and
releases its lease early can see the slot reused and rewritten under its copy; it
compares the generation it was given with the slot's current one after the copy,
and treats a changed one as a torn read (recomputes the block). The current
generations are published in a small shared-memory file (one native-endian uint64
per slot, mapped by model processes next to the pool), so the check costs no RPC.
The file is made read-only (mode 0400) once the sidecar has mapped it, and clients map
it read-only: the sidecar's mapping is the only writable one (a process running as the
sidecar's user could still chmod it back: see docs/security.md).

Ordering: the sidecar stores the new generation before the allocation's answer
leaves, and a writer writes only after that answer, so a reader that saw any byte
of the new contents sees the new generation when it reads it after its copy.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Protocol

from sidecar.kv.pool_files import GENERATIONS_PREFIX, create_locked


@dataclass(frozen=True, slots=True)
class GenerationsExport:
    """The generations file: num_slots native-endian uint64, slot i at byte 8 * i."""

    path: str
    size_bytes: int


class SlotGenerations(Protocol):
    """A generation counter per slot, readable by model processes."""

    def bump(self, slot: int) -> int:
        """Advance the slot's generation (it is about to be rewritten); the new value."""
        ...

    def get(self, slot: int) -> int:
        """The slot's current generation (0: never allocated)."""
        ...

    def export(self) -> GenerationsExport | None:
        """Where model processes map the generations (None: not shared)."""
        ...

    def close(self) -> None:
        """Release the storage."""
        ...


class MemoryGenerations:
    """Generations in a private list: the shipped fake (nothing to map)."""

    def __init__(self, num_slots: int) -> None:
        self._gen = [0] * num_slots

    def bump(self, slot: int) -> int:
        """Advance in place."""
        self._gen[slot] += 1
        return self._gen[slot]

    def get(self, slot: int) -> int:
        """The current value."""
        return self._gen[slot]

    def export(self) -> GenerationsExport | None:
        """Not shared."""
        return None

    def close(self) -> None:
        """Nothing to release."""


class SharedGenerations:
    """Generations in a shared-memory file under `directory` (plain mmap, no torch)."""

    def __init__(self, num_slots: int, directory: str) -> None:
        self.size_bytes = 8 * num_slots
        # Locked for the sidecar's life: the next start removes it only if we are gone.
        self._file = create_locked(directory, GENERATIONS_PREFIX)
        self.path = self._file.path
        try:
            os.ftruncate(self._file.fd, self.size_bytes)
            self._map = mmap.mmap(self._file.fd, self.size_bytes)
            # Nobody opens it for writing from now on (our descriptor and mapping stay).
            os.fchmod(self._file.fd, 0o400)
        except BaseException:
            self._file.release()
            raise
        # An aligned 8-byte item per slot: each store is one machine word.
        self._view = memoryview(self._map).cast("Q")

    def bump(self, slot: int) -> int:
        """Advance in the shared file (the sidecar is its only writer)."""
        value: int = self._view[slot] + 1
        self._view[slot] = value
        return value

    def get(self, slot: int) -> int:
        """The current value."""
        value: int = self._view[slot]
        return value

    def export(self) -> GenerationsExport:
        """The file's path and size."""
        return GenerationsExport(self.path, self.size_bytes)

    def close(self) -> None:
        """Unmap and unlink (mappers keep their mapping)."""
        self._view.release()
        self._map.close()
        self._file.release()
