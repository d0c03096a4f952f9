"""Fast mode's reads: every shard's sample windows coalesced into few preads, then cut
back into per-tensor evidence byte-for-byte equal to one pread per window.

Warm, fast mode's cost is mostly one system call per read (~1.1 us on the 2-core
reference VM) plus the Python around it. A tensor's last window ends at its final byte
and the next tensor's first starts at its byte 0, and small tensors read whole lie back
to back, so windows that touch, or lie within MERGE_GAP_BYTES (copying a few KiB costs
less than another call), are read as one run; gap bytes are dropped. Windows are
planned in file order, so the runs' bytes, gaps dropped, are every tensor's evidence
concatenated in file order, and each tensor's evidence is one slice of it.

Reads never use mmap: a checkpoint truncated while we read would SIGBUS the process,
where a short pread is an error we can name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import pairwise

from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.hashing import sample_spans
from infercache_client.fingerprint.safetensors_header import TensorEntry

# Windows at most this far apart share a pread: ~4 KiB of extra copy cost about one
# call warm, and cold they usually sit in the same or the next page anyway.
MERGE_GAP_BYTES = 4096
# A run of small tensors read whole stops growing here, so one pread's buffer stays
# small and a cold pool still has many reads to spread over its threads.
MAX_RUN_BYTES = 1 << 20

# Fast mode reads on one thread until a batch of PROBE_SEGMENTS segments averages slower
# than COLD_SECONDS_PER_READ per pread (warm: ~1-2 us), then switches to a thread pool
# so that cold disks and network storage see many reads in flight.
PROBE_SEGMENTS = 64
COLD_SECONDS_PER_READ = 20e-6
POOL_SEGMENTS = 16

Window = tuple[int, int]
"""(offset, length) in bytes."""
Segment = tuple[int, tuple[Window, ...]]
"""A base offset and the reads relative to it: one merged run, or a tensor's interior."""


@dataclass(frozen=True, slots=True)
class _Layout:
    """A tensor's windows by size, grouped where at most MERGE_GAP_BYTES apart: the first
    and last group may merge with the neighbouring tensors' windows, those in between
    are read on their own. A group is (offset, length, its windows if it spans gaps)."""

    head: tuple[int, int, tuple[Window, ...] | None]
    mids: tuple[Window, ...]
    mid_gaps: tuple[tuple[int, tuple[Window, ...]], ...]
    """(index in mids, evidence windows relative to that group) for groups with gaps."""
    mid_bytes: int
    tail: tuple[int, int, tuple[Window, ...] | None] | None
    evidence: int


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """How to read one shard's evidence: segments in file order, the reads whose
    gap bytes must be dropped (read index -> evidence windows relative to the read),
    bytes requested in all, and where each tensor's evidence ends in the concatenation."""

    segments: list[Segment]
    gaps: dict[int, tuple[Window, ...]]
    requested: int
    ends: list[int]


@lru_cache(maxsize=4096)
def layout(nbytes: int) -> _Layout:
    """The windows of a tensor of `nbytes` grouped by MERGE_GAP_BYTES; a function of size only."""
    spans = sample_spans(nbytes) or ((0, 0),)
    groups: list[list[Window]] = []
    for off, n in spans:
        if groups and off - (groups[-1][-1][0] + groups[-1][-1][1]) <= MERGE_GAP_BYTES:
            groups[-1].append((off, n))
        else:
            groups.append([(off, n)])
    head, *mids, tail = [_group(g) for g in groups] if len(groups) > 1 else [_group(groups[0])] * 2
    mid_gaps = tuple((i, g[2]) for i, g in enumerate(mids) if g[2] is not None)
    return _Layout(
        head,
        tuple((off, n) for off, n, _ in mids),
        mid_gaps,
        sum(n for _, n, _ in mids),
        tail if len(groups) > 1 else None,
        sum(n for _, n in spans),
    )


def _group(windows: list[Window]) -> tuple[int, int, tuple[Window, ...] | None]:
    first, end = windows[0][0], windows[-1][0] + windows[-1][1]
    if sum(n for _, n in windows) == end - first:
        return first, end - first, None
    return first, end - first, tuple((off - first, n) for off, n in windows)


def plan_shard(entries: Sequence[TensorEntry]) -> ShardPlan:
    """The coalesced reads of one shard whose `entries` are in file order (read_header's)."""
    segments: list[Segment] = []
    gaps: dict[int, tuple[Window, ...]] = {}
    ends: list[int] = []
    evidence = requested = reads = 0
    # The open run: [start, end) of the file, and (relative to start) its evidence
    # windows once it has bridged a gap; None while all its bytes are evidence.
    start = end = -1
    pieces: list[Window] | None = None
    for entry in entries:
        base = entry.start
        lay = layout(entry.end - base)
        evidence += lay.evidence
        ends.append(evidence)
        off, n, inner = lay.head
        at = base + off
        if end < 0 or at - end > MERGE_GAP_BYTES or at + n - start > MAX_RUN_BYTES:
            if end >= 0:
                requested += _close(segments, gaps, reads, start, end, pieces)
                reads += 1
            start = end = at
            pieces = None
        elif at != end and pieces is None:
            pieces = [(0, end - start)]
        if pieces is not None or inner is not None:
            pieces = _extend(pieces, start, end, at, n, inner)
        end = at + n
        if lay.tail is not None:
            # The tensor's own gaps are too wide to bridge: its head ends the open run,
            # its interior is read group by group, and its tail opens the next run.
            requested += _close(segments, gaps, reads, start, end, pieces)
            reads += 1
            if lay.mids:
                for index, keep in lay.mid_gaps:
                    gaps[reads + index] = keep
                segments.append((base, lay.mids))
                requested += lay.mid_bytes
                reads += len(lay.mids)
            off, n, inner = lay.tail
            start, end, pieces = base + off, base + off + n, None if inner is None else [*inner]
    if end >= 0:
        requested += _close(segments, gaps, reads, start, end, pieces)
    return ShardPlan(segments, gaps, requested, ends)


def _extend(
    pieces: list[Window] | None,
    start: int,
    end: int,
    at: int,
    n: int,
    inner: tuple[Window, ...] | None,
) -> list[Window]:
    # The open run's evidence windows after adding a group of n bytes at `at`.
    out = pieces if pieces is not None else [(0, end - start)] if end > start else []
    if inner is None:
        out.append((at - start, n))
    else:
        out += [(at - start + off, size) for off, size in inner]
    return out


def _close(
    segments: list[Segment],
    gaps: dict[int, tuple[Window, ...]],
    index: int,
    start: int,
    end: int,
    pieces: list[Window] | None,
) -> int:
    # Emits the open run as read number `index`; returns the bytes it requests.
    if pieces is not None:
        gaps[index] = tuple(pieces)
    segments.append((start, ((0, end - start),)))
    return end - start


def read_segments(fd: int, segments: Sequence[Segment]) -> list[bytes]:
    """One pread per read of `segments`, in order (short at end of file, never longer)."""
    pread = os.pread
    return [pread(fd, n, base + off) for base, reads in segments for off, n in reads]


def cut(
    plan: ShardPlan, data: list[bytes], entries: Sequence[TensorEntry], path: str
) -> list[memoryview]:
    """Each tensor's evidence from the bytes `read_segments` returned for `plan`."""
    if sum(map(len, data)) != plan.requested:
        raise FingerprintError(
            f"{path}: file shrank while reading tensor {_short(plan, data, entries)!r}"
        )
    for index, keep in plan.gaps.items():
        chunk = data[index]
        data[index] = b"".join([chunk[off : off + n] for off, n in keep])
    # Views, not copies: the evidence is only ever joined into the digest's input, and
    # a thousand ~2 KiB copies measured slower than the views.
    blob = memoryview(b"".join(data))
    return [blob[a:b] for a, b in pairwise([0, *plan.ends])]


def _short(plan: ShardPlan, data: list[bytes], entries: Sequence[TensorEntry]) -> str:
    # The tensor the first short read failed to deliver a window of.
    reads = [(base + off, n) for base, rel in plan.segments for off, n in rel]
    got = next(at + len(d) for (at, n), d in zip(reads, data, strict=True) if len(d) != n)
    for entry in entries:
        if any(entry.start + off + n > got for off, n in sample_spans(entry.nbytes)):
            return entry.name
    raise AssertionError("a short read must miss some window")  # pragma: no cover


def sample_all(
    shards: Sequence[tuple[int, Sequence[TensorEntry], str]], threads: int
) -> list[list[memoryview]]:
    """Fast-mode evidence of each tensor of each (fd, entries in file order, path) shard.

    Reads on the calling thread while the page cache answers quickly (a pool would only
    add overhead); once a batch of PROBE_SEGMENTS averages slower than
    COLD_SECONDS_PER_READ per read, the rest is read on `threads` threads.
    """
    plans = [plan_shard(entries) for _, entries, _ in shards]
    pool: ThreadPoolExecutor | None = None
    out: list[list[memoryview]] = []
    try:
        for (fd, entries, path), plan in zip(shards, plans, strict=True):
            segments, data, pos = plan.segments, [], 0
            while pos < len(segments) and pool is None:
                batch = segments[pos : pos + PROBE_SEGMENTS]
                started = time.perf_counter()
                got = read_segments(fd, batch)
                data += got
                pos += len(batch)
                elapsed = time.perf_counter() - started
                if threads > 1 and elapsed > COLD_SECONDS_PER_READ * max(1, len(got)):
                    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fp-sample")
            if pos < len(segments) and pool is not None:
                rest = segments[pos:]
                runs = [rest[i : i + POOL_SEGMENTS] for i in range(0, len(rest), POOL_SEGMENTS)]
                for part in pool.map(partial(read_segments, fd), runs):
                    data += part
            out.append(cut(plan, data, entries, path))
    finally:
        if pool is not None:
            pool.shutdown()
    return out
