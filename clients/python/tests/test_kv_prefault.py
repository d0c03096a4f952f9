"""Prefaulting a shared-memory pool's slots (infercache_client/kv/prefault.py): the
pages come into this process without a byte changing, and a range no page can back is
refused instead of raising SIGBUS on the write."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from infercache_client.kv.prefault import PAGE, Prefaulter, slot_ranges

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux madvise")


def _rss_kib(address: int) -> int:
    """Resident KiB of the mapping that starts at `address` (smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.split("-", 1)[0] == f"{address:x}" or line.split("-", 1)[0] == f"{address:08x}":
            for follow in lines[i + 1 :]:
                if follow.startswith("Rss:"):
                    return int(follow.split()[1])
    raise AssertionError("mapping not found in smaps")


@pytest.fixture
def shm_file(tmp_path: Path) -> Iterator[int]:
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    path = os.path.join(directory, f"ic-prefault-test-{os.getpid()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    try:
        yield fd
    finally:
        os.close(fd)


def test_slot_ranges_cover_each_slots_block_and_merge_neighbours() -> None:
    assert slot_ranges([3, 1, 2, 7], 100, 60) == [(100, 260), (700, 60)]
    assert slot_ranges([], 100, 60) == []


def test_populate_maps_the_pages_and_changes_no_byte(shm_file: int) -> None:
    size = 64 * PAGE
    os.ftruncate(shm_file, size)
    os.pwrite(shm_file, b"kept", 5 * PAGE)  # what another writer put in a slot
    m = mmap.mmap(shm_file, size)
    address = ctypes.addressof(ctypes.c_char.from_buffer(m))
    prefaulter = Prefaulter(address, size)
    if not prefaulter.supported:
        pytest.skip("no madvise here")
    before = _rss_kib(address)
    assert prefaulter.populate([(4 * PAGE + 10, 8 * PAGE)])
    if not prefaulter.supported:
        pytest.skip("kernel older than 5.14: MADV_POPULATE_WRITE unknown")
    assert _rss_kib(address) - before >= 9 * PAGE // 1024, "pages 4..12 now mapped here"
    assert m[5 * PAGE : 5 * PAGE + 4] == b"kept"
    assert m[4 * PAGE : 5 * PAGE] == bytes(PAGE)
    del address
    m.close()


def test_a_range_no_page_can_back_is_refused_not_a_sigbus(shm_file: int) -> None:
    size = 16 * PAGE
    os.ftruncate(shm_file, size)
    m = mmap.mmap(shm_file, size)
    address = ctypes.addressof(ctypes.c_char.from_buffer(m))
    prefaulter = Prefaulter(address, size)
    if not prefaulter.populate([(0, PAGE)]) or not prefaulter.supported:
        pytest.skip("MADV_POPULATE_WRITE unsupported here")
    os.ftruncate(shm_file, 8 * PAGE)  # the second half has no file behind it: a write SIGBUSes
    assert prefaulter.populate([(0, 8 * PAGE)]), "what the file backs is fine"
    assert not prefaulter.populate([(8 * PAGE, 4 * PAGE)])
    del address
    m.close()
