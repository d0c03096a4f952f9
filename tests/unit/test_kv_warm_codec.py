"""KV warm values: round trip, and every kind of damage refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sidecar.kv.layout import BlockKey
from sidecar.kv.warm import decode_block, encode_block

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
