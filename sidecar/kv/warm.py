"""The KV warm tier: demoted blocks as self-describing binary values in Redis.

Value layout (all integers big-endian):

    b"ICKV" | version u8 (3) | key length u16 | key | payload length u32
    | tag 32 bytes | payload

The tag is the keyed BLAKE3 of (model version tag, block key, payload), each
length-prefixed, under the fleet's "kv-block" key (sidecar/macs.py): a value
altered or planted by anyone without the fleet secret, torn, or moved under
another block's or version's Redis key is refused before a byte of it reaches a
slot. (Format 2 carried an unkeyed XXH3 anyone could recompute: refused.) Keys
are grouped per model version (`{prefix}kv:{version_tag}:{block key hex}`) so a
whole version can be dropped with one SCAN; `{prefix}kv:versions` remembers which
versions have values.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Sequence
from typing import Protocol

from blake3 import blake3

from sidecar.kv.layout import BlockKey
from sidecar.macs import LOCAL, FleetKeys

MAGIC = b"ICKV"
FORMAT_VERSION = 3
_HEAD = struct.Struct(">4sBH")
_LEN = struct.Struct(">I")
_PART = struct.Struct(">Q")
_SUM_BYTES = 32


def block_tag(mac_key: bytes, version: str, key: bytes, payload: bytes | memoryview) -> bytes:
    """The keyed tag of one block's bytes, stored with its warm value (and kept as its
    seal while it is hot: kv/integrity.py)."""
    # Blocks are large (tens of KiB to MiBs) and hashed on a worker thread: let BLAKE3
    # use more than one core for the big ones.
    h = blake3(key=mac_key, max_threads=blake3.AUTO if len(payload) >= 1 << 20 else 1)
    tag_v = version.encode()
    for part in (tag_v, key, payload):
        h.update(_PART.pack(len(part)))
        h.update(part)
    return h.digest()


def encode_block(
    key: BlockKey,
    payload: bytes | memoryview,
    keys: FleetKeys = LOCAL,
    version: str = "",
    *,
    tag: bytes | None = None,
) -> bytes:
    """The stored value for one block of `version` (the warm tier's version tag); `tag`:
    block_tag of the payload under keys' signing key, when already taken."""
    if tag is None:
        tag = block_tag(keys.signing_key("kv-block"), version, key, payload)
    return b"".join(
        (_HEAD.pack(MAGIC, FORMAT_VERSION, len(key)), key, _LEN.pack(len(payload)), tag, payload)
    )


def seal_copy(
    key: BlockKey, payload: bytes | memoryview, keys: FleetKeys, version: str
) -> tuple[bytearray, bytes]:
    """(the stored value, the payload's tag): encode_block with the payload copied once,
    and the tag taken over that copy, so the tag is of exactly the bytes stored whatever
    happens to `payload` meanwhile (a pool slot other processes can write)."""
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(key)) + key + _LEN.pack(len(payload))
    at = len(head) + _SUM_BYTES
    value = bytearray(at + len(payload))
    value[: len(head)] = head
    value[at:] = payload
    with memoryview(value) as view:
        tag = block_tag(keys.signing_key("kv-block"), version, key, view[at:])
    value[len(head) : at] = tag
    return value, tag


def decode_block(
    key: BlockKey, value: bytes, keys: FleetKeys = LOCAL, version: str = ""
) -> memoryview | None:
    """The payload (a view into value) if value is an authentic block stored under key
    and version, else None."""
    opened = open_block(key, value, keys, version)
    return None if opened is None else opened[0]


def open_block(
    key: BlockKey, value: bytes, keys: FleetKeys = LOCAL, version: str = ""
) -> tuple[memoryview, bytes] | None:
    """(payload, its tag under the signing key) if value is an authentic block stored
    under key and version, else None."""
    try:
        magic, layout, key_len = _HEAD.unpack_from(value, 0)
        at = _HEAD.size
        if magic != MAGIC or layout != FORMAT_VERSION or value[at : at + key_len] != key:
            return None
        at += key_len
        (length,) = _LEN.unpack_from(value, at)
        at += _LEN.size
        digest = value[at : at + _SUM_BYTES]
        at += _SUM_BYTES
    except struct.error:
        return None
    payload = memoryview(value)[at:]
    if len(payload) != length:
        return None
    signing, *older = keys.keys("kv-block")
    if hmac.compare_digest(block_tag(signing, version, key, payload), digest):
        return payload, bytes(digest)
    for mac_key in older:  # rotating: sealed by a secret now retiring, re-seal with the new
        if hmac.compare_digest(block_tag(mac_key, version, key, payload), digest):
            return payload, block_tag(signing, version, key, payload)
    return None


class KvWarmStore(Protocol):
    """Where demoted blocks live. Methods raise TierUnavailable when the backend fails."""

    keys: FleetKeys
    """The MAC keys blocks stored here are sealed and verified with."""

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes | bytearray]], ttl_ms: int
    ) -> None:
        """Store encoded values (see encode_block) under a version."""
        ...

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """Raw values in request order; None where absent."""
        ...

    async def versions(self) -> list[str]:
        """Versions that may have values."""
        ...

    async def note_version(self, version: str) -> None:
        """Remember that a version may have values."""
        ...

    async def drop_version(self, version: str) -> int:
        """Delete every value of a version; returns how many were deleted."""
        ...

    async def close(self) -> None:
        """Release connections this store owns."""
        ...


class MemoryKvWarmStore:
    """KvWarmStore in a dict (no TTL): the fake for unit tests."""

    def __init__(self, keys: FleetKeys = LOCAL) -> None:
        self.keys = keys
        self.values: dict[tuple[str, BlockKey], bytes] = {}
        self.known: set[str] = set()

    async def put_many(
        self, version: str, items: Sequence[tuple[BlockKey, bytes | bytearray]], ttl_ms: int
    ) -> None:
        """Store each value."""
        for key, value in items:
            self.values[(version, key)] = bytes(value)

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        """Values or None."""
        return [self.values.get((version, k)) for k in keys]

    async def versions(self) -> list[str]:
        """Known versions."""
        return sorted(self.known)

    async def note_version(self, version: str) -> None:
        """Remember the version."""
        self.known.add(version)

    async def drop_version(self, version: str) -> int:
        """Delete the version's values."""
        doomed = [k for k in self.values if k[0] == version]
        for k in doomed:
            del self.values[k]
        self.known.discard(version)
        return len(doomed)

    async def close(self) -> None:
        """Nothing to close."""
