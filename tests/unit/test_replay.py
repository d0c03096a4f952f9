"""Replay pacing schedules and chunk-boundary validation (pure logic)."""

from __future__ import annotations

import math

import pytest

from sidecar.entries import ChunkMeta, pack_chunks
from sidecar.errors import InvalidArgument, ResourceExhausted
from sidecar.results.chunks import check_finish_reason, chunk_table
from sidecar.results.pacing import PaceMode, Pacing, schedule
from sidecar.results.stream_store import BufferBudget

CHUNKS = [ChunkMeta(4, 2, 0), ChunkMeta(4, 0, 300), ChunkMeta(4, 4, 350), ChunkMeta(4, 1, 9000)]


def test_fastest_sends_everything_at_once() -> None:
    """FASTEST schedules every chunk at t=0."""
    assert schedule(CHUNKS, Pacing(), 5000) == [0.0, 0.0, 0.0, 0.0]


def test_tokens_per_second_waits_for_the_previous_chunks_tokens() -> None:
    """At 10 tokens/s a chunk waits tokens(previous)/10 s; unknown sizes count as one token."""
    times = schedule(CHUNKS, Pacing(PaceMode.TOKENS_PER_SECOND, 10.0), 5000)
    assert times == pytest.approx([0.0, 0.2, 0.3, 0.7])


def test_original_timing_uses_stored_gaps_capped_by_caller_and_sidecar() -> None:
    """ORIGINAL replays the stored gaps, each capped at max_delay_ms and the sidecar maximum."""
    uncapped = schedule(CHUNKS, Pacing(PaceMode.ORIGINAL), 60_000)
    assert uncapped == pytest.approx([0.0, 0.3, 0.35, 9.0])
    capped = schedule(CHUNKS, Pacing(PaceMode.ORIGINAL, max_delay_ms=100), 60_000)
    assert capped == pytest.approx([0.0, 0.1, 0.15, 0.25])
    server_cap = schedule(CHUNKS, Pacing(PaceMode.ORIGINAL), 1000)
    assert server_cap == pytest.approx([0.0, 0.3, 0.35, 1.35])


def test_sidecar_cap_bounds_a_very_slow_rate() -> None:
    """A rate of 0.001 tokens/s cannot hold a stream open for hours: gaps stop at the cap."""
    times = schedule(CHUNKS, Pacing(PaceMode.TOKENS_PER_SECOND, 0.001), 2000)
    assert times == pytest.approx([0.0, 2.0, 4.0, 6.0])


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf, 2e6])
def test_bad_rates_are_refused(rate: float) -> None:
    """A rate that is not a positive, finite, plausible number is INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgument) as err:
        Pacing(PaceMode.TOKENS_PER_SECOND, rate)
    assert err.value.field == "pacing.tokens_per_second"


def test_chunk_table_packs_valid_boundaries() -> None:
    """Boundaries that tile the payload pack to the entry's table; none packs to empty."""
    assert chunk_table(CHUNKS, 16, 8) == pack_chunks(CHUNKS)
    assert chunk_table([], 16, 8) == b""


@pytest.mark.parametrize(
    ("chunks", "payload_len", "field"),
    [
        (CHUNKS, 15, "chunks"),
        (CHUNKS * 3, 48, "chunks"),
        ([ChunkMeta(8, 0, 10), ChunkMeta(8, 0, 5)], 16, "chunks[1].offset_ms"),
        ([ChunkMeta(16, -1, 0)], 16, "chunks[0].tokens"),
        ([ChunkMeta(16, 0, 2**32)], 16, "chunks[0].offset_ms"),
    ],
)
def test_bad_boundaries_name_the_field(
    chunks: list[ChunkMeta], payload_len: int, field: str
) -> None:
    """Sizes off the payload, too many chunks, offsets going back or out of range are refused."""
    with pytest.raises(InvalidArgument) as err:
        chunk_table(chunks, payload_len, 8)
    assert err.value.field == field


@pytest.mark.parametrize("reason", ["x" * 65, "stop\n", "\x00"])
def test_bad_finish_reasons_are_refused(reason: str) -> None:
    """Finish reasons are short printable labels."""
    with pytest.raises(InvalidArgument):
        check_finish_reason(reason, required=True)
    with pytest.raises(InvalidArgument):
        check_finish_reason("", required=True)
    assert check_finish_reason("", required=False) == ""


def test_buffer_budget_refuses_past_its_limit_and_recovers() -> None:
    """Reservations beyond the shared budget are RESOURCE_EXHAUSTED until bytes come back."""
    budget = BufferBudget(10)
    budget.take(6)
    with pytest.raises(ResourceExhausted):
        budget.take(5)
    assert budget.used == 6
    budget.give_back(6)
    budget.take(10)
    assert budget.used == 10
