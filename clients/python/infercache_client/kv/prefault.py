"""Mapping a host pool's slots into this process before they are written.

A process that maps the sidecar's shared-memory pool gets each page into its page table
on first access: a write fault per 4 KiB page, and for a page nobody has touched yet,
the page's allocation and zeroing besides. A save of a 1,500-token prefix of a small
model writes 23 MiB into slots this process never touched: 7-16 ms of faults on a quiet
CPU here, 30-50 ms on a busy one, where the copy itself takes ~2 ms, and on the forward
pass. `populate` asks the kernel to do them in one call (MADV_POPULATE_WRITE, Linux
5.14), on whatever thread calls it (the connector's save thread, right after the slots
were allocated and before the forward pass ends).

The call never writes a byte (the slots may still hold what another writer put there:
nothing is changed), and where a page cannot be had (the pool's file system is full)
the kernel answers an error instead of the SIGBUS a plain write would raise: the
caller then does not save into those slots. Pure ctypes: no torch.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
from collections.abc import Callable, Sequence

MADV_POPULATE_WRITE = 23
"""linux/mman.h: prefault page tables writable, allocating pages as a write would."""
PAGE = mmap.PAGESIZE


class Prefaulter:
    """Populates byte ranges of one host mapping (a no-op where the kernel cannot)."""

    def __init__(self, address: int, size: int) -> None:
        """`address`, `size`: the mapping (page-aligned start, as mmap gives)."""
        self._address = address
        self._size = size
        self._madvise = _madvise()
        self.supported = self._madvise is not None
        """False once the kernel said it does not know MADV_POPULATE_WRITE (< 5.14)."""

    def populate(self, ranges: Sequence[tuple[int, int]]) -> bool:
        """Map each (offset, length) of the mapping writable now; False when the kernel
        could not provide the pages (the ranges must not be written), True otherwise
        (done, or not supported here: a write then faults as before)."""
        madvise = self._madvise
        if madvise is None:
            return True
        for offset, length in ranges:
            start = max(0, offset - offset % PAGE)
            end = min(self._size, offset + length)
            if end <= start:
                continue
            if madvise(self._address + start, end - start, MADV_POPULATE_WRITE) == 0:
                continue
            err = ctypes.get_errno()
            if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                self._madvise, self.supported = None, False  # an older kernel
                return True
            if err == errno.EINTR:
                continue  # a signal: the remaining pages fault on the write as before
            return False  # EFAULT / ENOMEM: a write would have raised SIGBUS
        return True


def slot_ranges(slots: Sequence[int], slot_bytes: int, nbytes: int) -> list[tuple[int, int]]:
    """(offset, length) covering the first `nbytes` of each slot, runs of consecutive
    slots merged."""
    out: list[tuple[int, int]] = []
    for slot in sorted(set(slots)):
        offset = slot * slot_bytes
        if out and out[-1][0] + out[-1][1] + (slot_bytes - nbytes) == offset:
            out[-1] = (out[-1][0], out[-1][1] + slot_bytes)
        else:
            out.append((offset, nbytes))
    return out


def _madvise() -> Callable[..., int] | None:
    """libc's madvise (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    fn = ctypes.CDLL(None, use_errno=True).madvise
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    madvise: Callable[..., int] = fn
    return madvise
