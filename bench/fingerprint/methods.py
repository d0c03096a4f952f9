"""The identification methods compared, and how they are timed (warm and cold page cache)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from blake3 import blake3
from infercache_client.fingerprint import fingerprint

READ_CHUNK = 16 << 20


def header_8kb(path: Path) -> str:
    """The naive method: config.json plus the first 8 KiB of the first two shards."""
    h = blake3((path / "config.json").read_bytes())
    for shard in sorted(path.glob("*.safetensors"))[:2]:
        with open(shard, "rb") as f:
            h.update(f.read(8192))
    return h.hexdigest()


METHODS: dict[str, Callable[[Path], str]] = {
    "8KB-header": header_8kb,
    "fast": lambda p: fingerprint(p, mode="fast").value,
    "full": lambda p: fingerprint(p, mode="full").value,
}


def plain_read(path: Path) -> str:
    """Sequential single-threaded read of every shard (the throughput baseline)."""
    buf = memoryview(bytearray(READ_CHUNK))
    total = 0
    for shard in sorted(path.glob("*.safetensors")):
        fd = os.open(shard, os.O_RDONLY)
        try:
            while n := os.readv(fd, [buf]):
                total += n
        finally:
            os.close(fd)
    return str(total)


def hash_ceiling(nbytes: int, threads: int) -> float:
    """Seconds BLAKE3 needs for `nbytes` already in memory on `threads` threads (no I/O)."""
    chunk = memoryview(np.random.default_rng(0).integers(0, 255, 1 << 20, np.uint8).tobytes())
    per = max(1, nbytes // threads // len(chunk))

    def work(_: int) -> None:
        h = blake3()
        for _ in range(per):
            h.update(chunk)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    return (time.perf_counter() - start) * nbytes / (per * threads * len(chunk))


def warm_times(fns: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Warm samples per method, taken round-robin so that a burst of load from other
    processes hits every method alike (their ratios stay meaningful on a shared box)."""
    inner = {m: 10 if m in ("8KB-header", "fast") else 1 for m in fns}
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {m: [] for m in fns}
    for _ in range(rounds):
        for m, fn in fns.items():
            for _ in range(inner[m]):
                start = time.perf_counter()
                fn()
                samples[m].append(time.perf_counter() - start)
    return samples


class Evictor:
    """Empties the page cache for a directory's files, and checks that it worked."""

    def __init__(self, ways: tuple[str, ...] = ("drop_caches", "fadvise")) -> None:
        """`ways`: tried in order; drop_caches empties the whole machine's page cache (root)."""
        self.ways = ways
        self.how = "n/a"
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

    def evict(self, root: Path) -> bool:
        """Empty the page cache of root's files; False when no way worked."""
        files = [p for p in root.iterdir() if p.is_file()]
        for how in self.ways:
            with contextlib.suppress(OSError):
                if how == "drop_caches":
                    os.sync()
                    Path("/proc/sys/vm/drop_caches").write_text("1\n")
                else:
                    for p in files:
                        fd = os.open(p, os.O_RDONLY)
                        try:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        finally:
                            os.close(fd)
                if max(self.resident(p) for p in files) < 0.02:
                    self.how = how
                    return True
        self.how = "n/a"
        return False

    def resident(self, path: Path) -> float:
        """Fraction of the file's pages in the page cache (mincore)."""
        size = path.stat().st_size
        if size == 0:
            return 0.0
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = self._libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                raise OSError(ctypes.get_errno(), "mmap")
            try:
                pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
                vec = (ctypes.c_ubyte * pages)()
                if self._libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore")
                return sum(v & 1 for v in bytes(vec)) / pages
            finally:
                self._libc.munmap(addr, size)
        finally:
            os.close(fd)


def cold_times(
    fns: Mapping[str, Callable[[], object]], root: Path, evictor: Evictor, repeat: int
) -> dict[str, float | None]:
    """Median time per method right after emptying the page cache (None if it can't be
    emptied); round-robin over methods, like warm_times."""
    samples: dict[str, list[float]] = {m: [] for m in fns}
    for _ in range(repeat):
        for m, fn in fns.items():
            if not evictor.evict(root):
                return dict.fromkeys(fns)
            start = time.perf_counter()
            fn()
            samples[m].append(time.perf_counter() - start)
    return {m: statistics.median(v) for m, v in samples.items()}
