"""Stored entries: a versioned binary codec that verifies itself on every read.

Layout (big-endian):

    magic "ICE" | codec version u8 | created_at_ms u64 | ttl_s u32 | epoch u64
    | latency_ms u32 | prompt_tokens u32 | completion_tokens u32
    | material_len u32 | payload_len u32 | material | payload | blake3(all before) 32 B

The entry carries its key's full material (dimensions plus input digest, never
prompt text). A read checks the checksum (corruption, truncation) and that the
material equals the material of the key being looked up (a foreign writer, a
value copied under the wrong key, or a digest collision). Either failure raises
EntryRejected: the caller counts it, answers MISS and deletes the value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from blake3 import blake3

CODEC_VERSION = 1
_MAGIC = b"ICE"
_HEADER = struct.Struct(">3sBQIQIIIII")
_CHECKSUM_LEN = 32


@dataclass(frozen=True, slots=True)
class ComputeCost:
    """What producing a result cost; returned on hits to account what was saved."""

    latency_ms: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Entry:
    """A cached result and everything needed to verify and expire it."""

    material: bytes
    payload: bytes
    created_at_ms: int
    ttl_s: int
    epoch: int = 0
    cost: ComputeCost = ComputeCost()

    @property
    def expires_at_ms(self) -> int:
        """Wall-clock expiry in milliseconds since the epoch."""
        return self.created_at_ms + self.ttl_s * 1000

    @property
    def nbytes(self) -> int:
        """Bytes this entry occupies once encoded (for byte-budget accounting)."""
        return _HEADER.size + len(self.material) + len(self.payload) + _CHECKSUM_LEN


class EntryRejected(Exception):
    """A stored value failed verification; `reason` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def encode(entry: Entry) -> bytes:
    """Serialise an entry with its trailing checksum."""
    header = _HEADER.pack(
        _MAGIC,
        CODEC_VERSION,
        entry.created_at_ms,
        entry.ttl_s,
        entry.epoch,
        entry.cost.latency_ms,
        entry.cost.prompt_tokens,
        entry.cost.completion_tokens,
        len(entry.material),
        len(entry.payload),
    )
    body = header + entry.material + entry.payload
    return body + blake3(body).digest()


def decode(data: bytes, expected_material: bytes) -> Entry:
    """Parse and verify a stored value against the key being looked up.

    Raises EntryRejected with reason "corrupt" (bad checksum, truncated, unknown
    format) or "foreign" (valid entry for a different key).
    """
    if len(data) < _HEADER.size + _CHECKSUM_LEN:
        raise EntryRejected("corrupt", f"value is {len(data)} bytes, shorter than any entry")
    body, checksum = data[:-_CHECKSUM_LEN], data[-_CHECKSUM_LEN:]
    (magic, version, created, ttl, epoch, lat, ptok, ctok, mlen, plen) = _HEADER.unpack_from(body)
    if magic != _MAGIC or version != CODEC_VERSION:
        raise EntryRejected("corrupt", f"unknown format {magic!r} v{version}")
    if _HEADER.size + mlen + plen != len(body):
        raise EntryRejected("corrupt", "lengths do not match the value size")
    if blake3(body).digest() != checksum:
        raise EntryRejected("corrupt", "checksum mismatch")
    material = body[_HEADER.size : _HEADER.size + mlen]
    if material != expected_material:
        raise EntryRejected("foreign", "entry belongs to a different key")
    return Entry(
        material=material,
        payload=body[_HEADER.size + mlen :],
        created_at_ms=created,
        ttl_s=ttl,
        epoch=epoch,
        cost=ComputeCost(lat, ptok, ctok),
    )


def peek(head: bytes) -> tuple[int, bytes] | None:
    """(epoch, key material) from the first bytes of an encoded entry, without
    verifying the checksum; None if the head is too short or not an entry.

    Good enough to decide what to reclaim; never used to serve a hit.
    """
    if len(head) < _HEADER.size:
        return None
    magic, version, _, _, epoch, _, _, _, mlen, _ = _HEADER.unpack_from(head)
    if magic != _MAGIC or version != CODEC_VERSION or len(head) < _HEADER.size + mlen:
        return None
    return epoch, head[_HEADER.size : _HEADER.size + mlen]
