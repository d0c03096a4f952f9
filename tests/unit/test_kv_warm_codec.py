"""KV warm values: round trip, and every kind of damage refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sidecar.kv.layout import BlockKey
from sidecar.kv.warm import decode_block, encode_block
from sidecar.macs import LOCAL, FleetKeys

KEY = BlockKey(b"s" * 32 + b"h" * 32)
PAYLOAD = bytes(range(256)) * 8


def test_round_trip() -> None:
    """An encoded block decodes to the same payload under the same key."""
    decoded = decode_block(KEY, encode_block(KEY, PAYLOAD))
    assert decoded is not None
    assert bytes(decoded) == PAYLOAD


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda v: v[:-1], id="truncated"),
        pytest.param(lambda v: v + b"x", id="extended"),
        pytest.param(lambda v: v[:-1] + bytes([v[-1] ^ 1]), id="payload bit flip"),
        pytest.param(lambda v: b"XXXX" + v[4:], id="bad magic"),
        pytest.param(lambda v: v[:4] + b"\x09" + v[5:], id="other format version"),
        pytest.param(lambda v: v[:10], id="header only"),
        pytest.param(lambda v: b"", id="empty"),
    ],
)
def test_damaged_values_are_refused(damage: Callable[[bytes], bytes]) -> None:
    """Truncation, extension, flipped bits and foreign headers all decode to None."""
    assert decode_block(KEY, damage(encode_block(KEY, PAYLOAD))) is None


def test_a_value_under_another_key_is_refused() -> None:
    """The embedded key material must be exactly the key asked for."""
    other = BlockKey(b"s" * 32 + b"H" * 32)
    assert decode_block(other, encode_block(KEY, PAYLOAD)) is None


def _xxh3_forgery(key: BlockKey, payload: bytes) -> bytes:
    """A block in the 88bc6e9 layout (format 2): an unkeyed XXH3-128 anyone can compute."""
    import struct

    import xxhash

    h = xxhash.xxh3_128(key)
    h.update(payload)
    return (
        struct.pack(">4sBH", b"ICKV", 2, len(key))
        + key
        + struct.pack(">I", len(payload))
        + h.digest()
        + payload
    )


def test_a_forged_block_with_a_recomputed_unkeyed_checksum_is_refused() -> None:
    """Issue 25: a block written in the old unkeyed layout, or in the new layout with a tag
    made without the fleet secret, is refused."""
    assert decode_block(KEY, _xxh3_forgery(KEY, PAYLOAD)) is None
    other = FleetKeys([b"not the fleet's secret, 32 bytes or more"])
    assert decode_block(KEY, encode_block(KEY, b"\xff" * len(PAYLOAD), other)) is None


def test_a_block_moved_to_another_version_is_refused() -> None:
    """The tag binds the model version tag of the Redis key the block was written under."""
    value = encode_block(KEY, PAYLOAD, LOCAL, "v1")
    assert decode_block(KEY, value, LOCAL, "v1") is not None
    assert decode_block(KEY, value, LOCAL, "v2") is None


def test_rotation_verifies_blocks_of_either_secret() -> None:
    """With [new, old] configured, blocks sealed under old still verify."""
    old = FleetKeys([b"the old fleet secret, 32 bytes or more"])
    both = FleetKeys(
        [b"the new fleet secret, 32 bytes or more", b"the old fleet secret, 32 bytes or more"]
    )
    assert decode_block(KEY, encode_block(KEY, PAYLOAD, old), both) is not None
