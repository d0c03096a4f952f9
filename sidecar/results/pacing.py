"""Replaying a cached result as a stream: its original chunks, paced as asked.

Pacing is a schedule of send times computed up front from the entry's chunk
table, and each chunk waits for its absolute time (no drift from sleeping in
steps). A replay holds nothing but the entry it already has, so a caller that
goes away costs nothing further: the generator is cancelled at its next await.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum

from sidecar.entries import ChunkMeta, Entry
from sidecar.errors import DeadlineExceeded, InvalidArgument

MAX_TOKENS_PER_SECOND = 1_000_000.0
"""Faster than this is indistinguishable from FASTEST; refusing it catches unit mix-ups."""


class PaceMode(Enum):
    """How fast chunks are sent."""

    FASTEST = "fastest"
    TOKENS_PER_SECOND = "tokens_per_second"
    ORIGINAL = "original"


@dataclass(frozen=True, slots=True)
class Pacing:
    """A replay speed. `max_delay_ms` (ORIGINAL) caps each gap; 0 = no caller cap."""

    mode: PaceMode = PaceMode.FASTEST
    tokens_per_second: float = 0.0
    max_delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.mode is PaceMode.TOKENS_PER_SECOND:
            rate = self.tokens_per_second
            if not (math.isfinite(rate) and 0 < rate <= MAX_TOKENS_PER_SECOND):
                raise InvalidArgument(
                    "pacing.tokens_per_second",
                    f"must be > 0 and <= {MAX_TOKENS_PER_SECOND:.0f}, got {rate}",
                )


@dataclass(frozen=True, slots=True)
class ReplayChunk:
    """One replayed chunk: its position, its stored metadata and its bytes."""

    index: int
    meta: ChunkMeta
    data: bytes


def schedule(chunks: list[ChunkMeta], pacing: Pacing, max_gap_ms: int) -> list[float]:
    """Seconds after the start at which each chunk is sent; the first is sent at once.

    TOKENS_PER_SECOND: a chunk waits for the tokens of the chunk before it to
    play at the rate (a chunk of unknown size counts as one token), so a replay
    of T tokens whose last chunk holds t takes (T - t) / rate. ORIGINAL: the
    stored gaps between chunks. Every gap is capped at max_gap_ms (the sidecar's
    limit) and, for ORIGINAL, at the caller's max_delay_ms.
    """
    times = [0.0] * len(chunks)
    if pacing.mode is PaceMode.FASTEST:
        return times
    cap_ms = float(max_gap_ms)
    if pacing.mode is PaceMode.ORIGINAL and pacing.max_delay_ms:
        cap_ms = min(cap_ms, pacing.max_delay_ms)
    at = 0.0
    for i in range(1, len(chunks)):
        if pacing.mode is PaceMode.TOKENS_PER_SECOND:
            gap_ms = max(1, chunks[i - 1].tokens) * 1000 / pacing.tokens_per_second
        else:
            gap_ms = max(0, chunks[i].offset_ms - chunks[i - 1].offset_ms)
        at += min(gap_ms, cap_ms) / 1000
        times[i] = at
    return times


async def replay(
    entry: Entry, pacing: Pacing, max_gap_ms: int, max_duration_ms: int | None = None
) -> AsyncIterator[ReplayChunk]:
    """The entry's chunks in order, each at its scheduled time.

    DeadlineExceeded, after the chunks sent so far, as soon as the next chunk is
    scheduled later than `max_duration_ms` after the start (None: no cap). It is
    raised at once rather than at the cap: waiting would only delay the verdict.
    """
    pieces = list(entry.chunks())
    times = schedule([meta for meta, _ in pieces], pacing, max_gap_ms)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, ((meta, data), at) in enumerate(zip(pieces, times, strict=True)):
        if max_duration_ms is not None and at * 1000 > max_duration_ms:
            raise DeadlineExceeded(
                f"replay truncated: chunk {i} of {len(pieces)} is paced {at:.1f} s after "
                f"the start; replays are capped at {max_duration_ms} ms "
                "(INFERCACHE_REPLAY_MAX_DURATION_MS)"
            )
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield ReplayChunk(i, meta, data)
