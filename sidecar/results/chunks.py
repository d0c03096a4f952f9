"""Chunk boundaries of a streamed result: validation into the entry's packed table."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.entries import MAX_FINISH_REASON_BYTES, ChunkMeta, pack_chunks
from sidecar.errors import InvalidArgument

MAX_FINISH_REASON_CHARS = 64
"""Finish reasons are short labels ("stop", "length", "tool_calls", ...)."""
_U32 = 2**32 - 1


def chunk_table(chunks: Sequence[ChunkMeta], payload_len: int, max_chunks: int) -> bytes:
    """The packed table for `chunks`, or InvalidArgument naming what is wrong.

    Sizes must add up to the payload's length and offsets never go back;
    no chunks means the payload is stored as one piece (an empty table).
    """
    if len(chunks) > max_chunks:
        raise InvalidArgument(
            "chunks",
            f"has {len(chunks)} chunks; the limit is {max_chunks} (INFERCACHE_MAX_CHUNKS)",
        )
    total = 0
    last_offset = 0
    for i, c in enumerate(chunks):
        for name in ("size_bytes", "tokens", "offset_ms"):
            value = getattr(c, name)
            if not 0 <= value <= _U32:
                raise InvalidArgument(f"chunks[{i}].{name}", f"{value} is not a u32")
        if c.offset_ms < last_offset:
            raise InvalidArgument(
                f"chunks[{i}].offset_ms",
                f"{c.offset_ms} is before the previous chunk's {last_offset}",
            )
        last_offset = c.offset_ms
        total += c.size_bytes
    if chunks and total != payload_len:
        raise InvalidArgument(
            "chunks", f"sizes add up to {total} bytes but the payload is {payload_len}"
        )
    return pack_chunks(chunks)


def check_finish_reason(reason: str, *, required: bool) -> str:
    """A finish reason as stored with the entry; InvalidArgument if empty (when
    required), too long, or not printable."""
    if not reason:
        if required:
            raise InvalidArgument("finish.finish_reason", "is required to commit a stream")
        return reason
    if len(reason) > MAX_FINISH_REASON_CHARS or len(reason.encode()) > MAX_FINISH_REASON_BYTES:
        raise InvalidArgument(
            "finish.finish_reason", f"is longer than {MAX_FINISH_REASON_CHARS} characters"
        )
    if not reason.isprintable():
        raise InvalidArgument("finish.finish_reason", "has non-printable characters")
    return reason
