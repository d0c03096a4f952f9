"""Stored entries: a versioned binary codec that authenticates itself on every read.

Two layouts (big-endian), both followed by a 32-byte tag, the keyed BLAKE3 of all
before it under the fleet's entry key (sidecar/macs.py):

    v3: magic "ICE" | 3 u8 | created_at_ms u64 | ttl_s u32 | epoch u64
        | latency_ms u32 | prompt_tokens u32 | completion_tokens u32
        | material_len u32 | payload_len u32 | material | payload
    v4: the v3 header with version 4, then chunk_count u32 | finish_len u8
        | material | finish_reason | chunk table | payload

A chunk table row is (size_bytes u32, tokens u32, offset_ms u32); the sizes
tile the payload. An entry with neither chunks nor a finish reason is written
as v3. The key material comes right after the header in both layouts (peek
relies on it). v1 and v2 (the same layouts under an unkeyed checksum anyone could
recompute) are refused as "forged": nothing proves a sidecar wrote them.

The entry carries its key's full material (dimensions plus input digest, never
prompt text), under the tag. A read checks the tag (corruption, truncation, a
writer without the fleet secret) and that the material equals the material of the
key being looked up (a genuine value copied under another key, a digest
collision). Either failure raises EntryRejected: the caller counts it, answers
MISS and deletes the value. `check_bounds` refuses a genuine-looking entry that
names an epoch the store has not reached, a TTL above the fleet's maximum or a
creation time in the future.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from blake3 import blake3

from sidecar.macs import LOCAL, FleetKeys

CODEC_VERSION = 4
"""The newest layout this module writes (when an entry needs it) and reads."""
_MAGIC = b"ICE"
_HEADER_V1 = struct.Struct(">3sBQIQIIIII")
_HEADER_V2 = struct.Struct(">3sBQIQIIIIIIB")
_CHUNK = struct.Struct(">III")
_CHECKSUM_LEN = 32
_PLAIN, _CHUNKED = 3, 4
_UNKEYED = (1, 2)
CLOCK_SKEW_MS = 5000
"""How far in the future a creation time may lie (clocks of the fleet disagree a little)."""
MAX_FINISH_REASON_BYTES = 255
"""A finish reason is stored behind a one-byte length."""


@dataclass(frozen=True, slots=True)
class ComputeCost:
    """What producing a result cost; returned on hits to account what was saved."""

    latency_ms: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChunkMeta:
    """One chunk of a streamed result: its size, its tokens (0 = unknown) and when
    it was produced (milliseconds from the start of the generation)."""

    size_bytes: int
    tokens: int = 0
    offset_ms: int = 0


def pack_chunks(chunks: Iterable[ChunkMeta]) -> bytes:
    """The packed chunk table an Entry holds (12 bytes a chunk, not a Python object each)."""
    pack = _CHUNK.pack
    return b"".join(pack(c.size_bytes, c.tokens, c.offset_ms) for c in chunks)


@dataclass(frozen=True, slots=True)
class Entry:
    """A cached result and everything needed to verify and expire it.

    `chunk_table` is empty for a result stored in one piece; see `chunks()`.
    """

    material: bytes
    payload: bytes
    created_at_ms: int
    ttl_s: int
    epoch: int = 0
    cost: ComputeCost = ComputeCost()
    chunk_table: bytes = b""
    finish_reason: str = ""

    @property
    def expires_at_ms(self) -> int:
        """Wall-clock expiry in milliseconds since the epoch."""
        return self.created_at_ms + self.ttl_s * 1000

    @property
    def nbytes(self) -> int:
        """Bytes this entry occupies once encoded (for byte-budget accounting)."""
        size = len(self.material) + len(self.payload) + _CHECKSUM_LEN
        if self._is_v1:
            return _HEADER_V1.size + size
        return _HEADER_V2.size + size + len(self.finish_reason.encode()) + len(self.chunk_table)

    @property
    def chunk_count(self) -> int:
        """How many chunks a replay sends (a result stored in one piece is one chunk)."""
        return len(self.chunk_table) // _CHUNK.size if self.chunk_table else 1

    def chunks(self) -> Iterator[tuple[ChunkMeta, bytes]]:
        """(metadata, bytes) of each chunk, in order.

        A result stored without boundaries is one chunk holding all its
        completion tokens, produced at offset 0.
        """
        if not self.chunk_table:
            yield ChunkMeta(len(self.payload), self.cost.completion_tokens, 0), self.payload
            return
        pos = 0
        view = memoryview(self.payload)
        for size, tokens, offset in _CHUNK.iter_unpack(self.chunk_table):
            yield ChunkMeta(size, tokens, offset), bytes(view[pos : pos + size])
            pos += size

    @property
    def _is_v1(self) -> bool:
        return not self.chunk_table and not self.finish_reason


class EntryRejected(Exception):
    """A stored value failed verification; `reason` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def encode(entry: Entry, keys: FleetKeys = LOCAL) -> bytes:
    """Serialise an entry with its trailing tag (v3 unless it has chunks or a finish reason).

    Raises ValueError for a chunk table that does not tile the payload or a
    finish reason over MAX_FINISH_REASON_BYTES (callers validate before this).
    """
    cost = entry.cost
    fixed = (
        entry.created_at_ms,
        entry.ttl_s,
        entry.epoch,
        cost.latency_ms,
        cost.prompt_tokens,
        cost.completion_tokens,
        len(entry.material),
        len(entry.payload),
    )
    if entry._is_v1:
        body = _HEADER_V1.pack(_MAGIC, _PLAIN, *fixed) + entry.material + entry.payload
        return body + blake3(body, key=keys.signing_key("entry")).digest()
    finish = entry.finish_reason.encode()
    if len(finish) > MAX_FINISH_REASON_BYTES:
        raise ValueError(f"finish reason is {len(finish)} bytes; at most 255 fit")
    count = _check_table(entry.chunk_table, len(entry.payload))
    if count is None:
        raise ValueError("chunk table does not tile the payload")
    header = _HEADER_V2.pack(_MAGIC, _CHUNKED, *fixed, count, len(finish))
    body = header + entry.material + finish + entry.chunk_table + entry.payload
    return body + blake3(body, key=keys.signing_key("entry")).digest()


def _check_table(table: bytes, payload_len: int) -> int | None:
    """Rows in a chunk table whose sizes add up to payload_len and whose offsets
    never go back; None otherwise. An empty table is fine (0 rows)."""
    if len(table) % _CHUNK.size:
        return None
    total = 0
    last_offset = 0
    for size, _, offset in _CHUNK.iter_unpack(table):
        total += size
        if offset < last_offset:
            return None
        last_offset = offset
    if table and total != payload_len:
        return None
    return len(table) // _CHUNK.size


def decode(data: bytes, expected_material: bytes, keys: FleetKeys = LOCAL) -> Entry:
    """Parse and authenticate a stored value against the key being looked up.

    Raises EntryRejected with reason "corrupt" (truncated, unknown format), "forged"
    (the tag does not verify under any fleet secret, or an unkeyed old format) or
    "foreign" (an authentic entry of a different key).
    """
    entry = _decode(data, keys)
    if entry.material != expected_material:
        raise EntryRejected("foreign", "entry belongs to a different key")
    return entry


def decode_by_digest(data: bytes, digest: bytes, keys: FleetKeys = LOCAL) -> Entry:
    """Parse and verify a value found under `digest` when the key itself is unknown.

    The digest is the SHA-256 of the key material, so material hashing to it
    proves the entry belongs there (the same guarantee `decode` gets by comparing
    material). Raises EntryRejected like decode.
    """
    entry = _decode(data, keys)
    if hashlib.sha256(entry.material).digest() != digest:
        raise EntryRejected("foreign", "entry material does not hash to its digest")
    return entry


def check_bounds(entry: Entry, now_ms: int, store_epoch: int, max_ttl_s: int) -> None:
    """EntryRejected unless the entry fits what the fleet can have written: an epoch the
    store has reached ("future_epoch"), a TTL within the fleet maximum ("ttl") and a
    creation time not ahead of now by more than CLOCK_SKEW_MS ("future")."""
    if entry.epoch > store_epoch:
        raise EntryRejected("future_epoch", f"epoch {entry.epoch} > store epoch {store_epoch}")
    if entry.ttl_s > max_ttl_s:
        raise EntryRejected("ttl", f"ttl {entry.ttl_s} s > the fleet maximum {max_ttl_s} s")
    if entry.created_at_ms > now_ms + CLOCK_SKEW_MS:
        raise EntryRejected("future", f"created {entry.created_at_ms - now_ms} ms from now")


def _authentic(body: bytes, tag: bytes, keys: FleetKeys) -> bool:
    # One keyed hash of the body per read (the signing key first: rotation is rare).
    for key in keys.keys("entry"):
        if hmac.compare_digest(blake3(body, key=key).digest(), tag):
            return True
    return False


def _decode(data: bytes, keys: FleetKeys) -> Entry:
    if len(data) < _HEADER_V1.size + _CHECKSUM_LEN:
        raise EntryRejected("corrupt", f"value is {len(data)} bytes, shorter than any entry")
    body, checksum = data[:-_CHECKSUM_LEN], data[-_CHECKSUM_LEN:]
    magic, version = body[:3], body[3]
    if magic == _MAGIC and version in _UNKEYED:
        raise EntryRejected("forged", f"format v{version} carries no fleet tag")
    if magic != _MAGIC or version not in (_PLAIN, _CHUNKED):
        raise EntryRejected("corrupt", f"unknown format {magic!r} v{version}")
    count = finish_len = 0
    if version == _PLAIN:
        header = _HEADER_V1
        (_, _, created, ttl, epoch, lat, ptok, ctok, mlen, plen) = header.unpack_from(body)
    else:
        header = _HEADER_V2
        if len(body) < header.size:
            raise EntryRejected("corrupt", "value is shorter than its header")
        (_, _, created, ttl, epoch, lat, ptok, ctok, mlen, plen, count, finish_len) = (
            header.unpack_from(body)
        )
    table_len = count * _CHUNK.size
    if header.size + mlen + finish_len + table_len + plen != len(body):
        raise EntryRejected("corrupt", "lengths do not match the value size")
    if not _authentic(body, checksum, keys):
        raise EntryRejected("forged", "tag does not verify under the fleet secret")
    pos = header.size
    material = body[pos : pos + mlen]
    pos += mlen
    try:
        finish = body[pos : pos + finish_len].decode()
    except UnicodeDecodeError as exc:
        raise EntryRejected("corrupt", "finish reason is not UTF-8") from exc
    pos += finish_len
    table = body[pos : pos + table_len]
    pos += table_len
    if _check_table(table, plen) is None or (version == _CHUNKED and not table and not finish):
        raise EntryRejected("corrupt", "chunk table does not tile the payload")
    return Entry(
        material=material,
        payload=body[pos:],
        created_at_ms=created,
        ttl_s=ttl,
        epoch=epoch,
        cost=ComputeCost(lat, ptok, ctok),
        chunk_table=table,
        finish_reason=finish,
    )


_HEADERS = {1: _HEADER_V1, 2: _HEADER_V2, _PLAIN: _HEADER_V1, _CHUNKED: _HEADER_V2}


def head_size(head: bytes) -> int | None:
    """How many leading bytes of this entry hold its header and whole key material
    (what peek needs), read from at least the fixed header; None if not an entry."""
    if len(head) < _HEADER_V1.size or head[:3] != _MAGIC:
        return None
    header = _HEADERS.get(head[3])
    if header is None or len(head) < header.size:
        return None
    mlen: int = header.unpack_from(head)[8]
    return header.size + mlen


def peek(head: bytes) -> tuple[int, bytes] | None:
    """(epoch, key material) from the first bytes of an encoded entry, without
    verifying the checksum; None if the head is too short or not an entry.

    Good enough to decide what to reclaim; never used to serve a hit.
    """
    if len(head) < _HEADER_V1.size or head[:3] != _MAGIC:
        return None
    header = _HEADERS.get(head[3])
    if header is None or len(head) < header.size:
        return None
    _, _, _, _, epoch, _, _, _, mlen, *_ = header.unpack_from(head)
    if len(head) < header.size + mlen:
        return None
    return epoch, head[header.size : header.size + mlen]
