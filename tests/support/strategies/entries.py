"""Stored entries (one-shot and streamed) and LRU operation sequences."""

from __future__ import annotations

from hypothesis import strategies as st

from sidecar.entries import ChunkMeta, ComputeCost, Entry, pack_chunks


def u32s() -> st.SearchStrategy[int]:
    """An unsigned 32-bit integer."""
    return st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def stored_entries(draw: st.DrawFn) -> Entry:
    """Any encodable Entry."""
    return Entry(
        material=draw(st.binary(min_size=1, max_size=200)),
        payload=draw(st.binary(max_size=500)),
        created_at_ms=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        ttl_s=draw(u32s()),
        epoch=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        cost=ComputeCost(draw(u32s()), draw(u32s()), draw(u32s())),
    )


@st.composite
def streamed_entries(draw: st.DrawFn) -> Entry:
    """Any encodable Entry with chunk boundaries and a finish reason."""
    parts = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=20))
    offsets = sorted(draw(st.lists(u32s(), min_size=len(parts), max_size=len(parts))))
    tokens = draw(st.lists(u32s(), min_size=len(parts), max_size=len(parts)))
    return Entry(
        material=draw(st.binary(min_size=1, max_size=200)),
        payload=b"".join(parts),
        created_at_ms=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        ttl_s=draw(u32s()),
        epoch=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        cost=ComputeCost(draw(u32s()), draw(u32s()), draw(u32s())),
        chunk_table=pack_chunks(
            ChunkMeta(len(p), t, o) for p, t, o in zip(parts, tokens, offsets, strict=True)
        ),
        finish_reason=draw(st.sampled_from(["stop", "length", "tool_calls", "", "ünï"])),
    )


LruOp = tuple[str, int, int]
"""("put", key, size), ("get", key, 0) or ("pop", key, 0)."""


def lru_ops(max_key: int = 6, max_size: int = 40) -> st.SearchStrategy[list[LruOp]]:
    """A sequence of LRU operations over a few keys."""
    key = st.integers(min_value=0, max_value=max_key)
    op = st.one_of(
        st.tuples(st.just("put"), key, st.integers(min_value=0, max_value=max_size)),
        st.tuples(st.sampled_from(["get", "pop"]), key, st.just(0)),
    )
    return st.lists(op, max_size=60)
