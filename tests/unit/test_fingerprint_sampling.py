"""Fast mode's coalesced reads: the evidence equals one pread per sample window."""

from __future__ import annotations

import contextlib
import os
import random
import struct
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from infercache_client.fingerprint import FingerprintError, sampling
from infercache_client.fingerprint.hashing import WHOLE_BYTES, frame, sample_spans, tensor_record
from infercache_client.fingerprint.safetensors_header import TensorEntry

# Sizes around every boundary the planner cares about: empty, whole reads, tensors
# whose windows bridge gaps (16-40 KiB) and tensors whose windows stand alone.
SIZES = st.one_of(
    st.sampled_from([0, 1, 255, 256, WHOLE_BYTES, WHOLE_BYTES + 1]),
    st.integers(0, WHOLE_BYTES),
    st.integers(WHOLE_BYTES, 40 * 1024),
    # Windows 4096 or 4097 bytes apart by rounding: some groups of one tensor bridge
    # gaps, others do not.
    st.integers(30_700, 30_740),
    st.integers(40 * 1024, 300 * 1024),
)


def _entries(sizes: Sequence[int], spacing: Sequence[int], data_start: int) -> list[TensorEntry]:
    out, at = [], data_start
    for i, (size, space) in enumerate(zip(sizes, spacing, strict=True)):
        at += space
        out.append(TensorEntry(f"t{i}", "U8", (size,), at, at + size))
        at += size
    return out


def _one_pread_per_window(fd: int, entries: Sequence[TensorEntry]) -> list[bytes]:
    return [
        b"".join(os.pread(fd, n, e.start + off) for off, n in sample_spans(e.nbytes))
        for e in entries
    ]


@contextlib.contextmanager
def _file(entries: Sequence[TensorEntry], seed: int) -> Iterator[tuple[int, str]]:
    end = max((e.end for e in entries), default=0)
    with tempfile.NamedTemporaryFile() as f:
        f.write(random.Random(seed).randbytes(end))
        f.flush()
        yield f.fileno(), f.name


@settings(max_examples=150, deadline=None)
# Groups bridging gaps at a tensor's start, middle (30723 B) and end, and runs bridging
# the gaps between tensors.
@example([(30723, 0), (16385, 0), (100, 4096), (30723, 5000), (0, 0)], 8, 20_000, 1)
@given(
    st.lists(st.tuples(SIZES, st.sampled_from([0, 0, 0, 1, 300, 4096, 4097, 70_000])), max_size=40),
    st.sampled_from([0, 8, 1000]),
    st.sampled_from([sampling.MAX_RUN_BYTES, 20_000]),
    st.integers(0, 2**32),
)
def test_coalesced_evidence_equals_one_pread_per_window(
    layout: list[tuple[int, int]], data_start: int, max_run: int, seed: int
) -> None:
    """For any layout (gaps between tensors too), any run cap, the evidence is unchanged."""
    entries = _entries([s for s, _ in layout], [g for _, g in layout], data_start)
    old = sampling.MAX_RUN_BYTES
    sampling.MAX_RUN_BYTES = max_run
    try:
        with _file(entries, seed) as (fd, path):
            expected = _one_pread_per_window(fd, entries)
            assert sampling.sample_all([(fd, entries, path)], 1) == [expected]
            plan = sampling.plan_shard(entries)
            reads = [n for _, rel in plan.segments for _, n in rel]
            assert sum(reads) == plan.requested
            assert all(n <= max(max_run, 64 * 1024) for n in reads)
    finally:
        sampling.MAX_RUN_BYTES = old


def test_touching_windows_share_a_read() -> None:
    """Back-to-back small tensors and a large tensor's end windows cost one read per run."""
    big = 1 << 20
    entries = _entries([100, 200, big, 300, big], [0] * 5, 8)
    plan = sampling.plan_shard(entries)
    runs = [(base + off, n) for base, rel in plan.segments for off, n in rel]
    # [t0 t1 big.first] [6 interior windows] [big.last t3 big2.first] [6] [big2.last]
    assert len(runs) == 1 + 6 + 1 + 6 + 1
    assert runs[0] == (8, 100 + 200 + 256)
    assert not plan.gaps


def test_parallel_reads_give_the_same_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread pool (cold path) returns exactly what the calling thread would."""
    rng = random.Random(7)
    entries = _entries([rng.choice([10, 5000, 30_000, 200_000]) for _ in range(300)], [0] * 300, 8)
    with _file(entries, 1) as (fd, path):
        expected = sampling.sample_all([(fd, entries, path)], 1)
        monkeypatch.setattr(sampling, "PROBE_SEGMENTS", 3)
        monkeypatch.setattr(sampling, "POOL_SEGMENTS", 5)
        monkeypatch.setattr(sampling, "COLD_SECONDS_PER_READ", 0.0)
        assert sampling.sample_all([(fd, entries, path), (fd, entries, path)], 4) == [
            expected[0],
            expected[0],
        ]


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize(
    ("cut_at", "victim"),
    [
        (8 + 100 + 50, "t1"),
        (8 + 100 + 200 + 10, "t2"),
        (8 + 300 + 150_000, "t2"),
        (8, "t0"),
        (200_330, "t3"),
    ],
)
def test_file_truncated_mid_run_names_the_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, cut_at: int, victim: str
) -> None:
    """A file that shrank under a merged read raises FingerprintError naming the tensor
    whose window was cut, not a later one and not a bare short read."""
    monkeypatch.setattr(sampling, "COLD_SECONDS_PER_READ", 0.0 if threads > 1 else 1.0)
    monkeypatch.setattr(sampling, "PROBE_SEGMENTS", 1)
    entries = _entries([100, 200, 200_000, 50], [0] * 4, 8)
    path = tmp_path / "shard.safetensors"
    path.write_bytes(bytes(entries[-1].end))
    os.truncate(path, cut_at)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(FingerprintError, match=rf"shard\.safetensors.*shrank.*'{victim}'"):
            sampling.sample_all([(fd, entries, str(path))], threads)
    finally:
        os.close(fd)


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.sampled_from(["BF16", "F8_E4M3FNUZ", ""]),
    st.lists(st.integers(0, 2**64 - 1), max_size=5),
    st.binary(max_size=3000),
)
def test_tensor_record_is_frame_of_its_fields(
    name: str, dtype: str, shape: list[int], evidence: bytes
) -> None:
    """The one-Struct record is byte for byte frame(name, dtype, dims, evidence)."""
    dims = struct.pack(f"<{len(shape)}Q", *shape)
    expected = frame(name.encode(), dtype.encode(), dims, evidence)
    assert tensor_record(name, dtype, shape, evidence) == expected
