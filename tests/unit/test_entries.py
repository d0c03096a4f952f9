"""Stored entries: the codec round-trips and every damaged or misplaced value is rejected."""

from __future__ import annotations

import struct

import pytest
from blake3 import blake3
from hypothesis import given

from sidecar import entries
from sidecar.entries import CODEC_VERSION, ComputeCost, Entry, EntryRejected
from tests.strategies import stored_entries

MATERIAL = b"ICK\x01" + b"\x00\x00\x00\x04acme" + b"key material"
ENTRY = Entry(
    material=MATERIAL,
    payload=b"The answer is 42.",
    created_at_ms=1_700_000_000_123,
    ttl_s=600,
    epoch=7,
    cost=ComputeCost(latency_ms=850, prompt_tokens=120, completion_tokens=33),
)
ENCODED = entries.encode(ENTRY)


def reason(data: bytes, material: bytes = MATERIAL) -> str:
    with pytest.raises(EntryRejected) as err:
        entries.decode(data, material)
    return err.value.reason


def test_round_trip_keeps_every_field() -> None:
    """decode(encode(e)) returns an equal entry."""
    assert entries.decode(ENCODED, MATERIAL) == ENTRY


def test_empty_payload_round_trips() -> None:
    """An empty result is a valid entry, distinct from absence."""
    empty = Entry(material=MATERIAL, payload=b"", created_at_ms=1, ttl_s=1)
    assert entries.decode(entries.encode(empty), MATERIAL) == empty


def test_nbytes_is_the_encoded_size() -> None:
    """Entry.nbytes, used for byte budgets, equals the encoded length."""
    assert ENTRY.nbytes == len(ENCODED)


def test_expiry_is_created_plus_ttl() -> None:
    """expires_at_ms is created_at_ms plus ttl_s in milliseconds."""
    assert ENTRY.expires_at_ms == 1_700_000_000_123 + 600_000


@given(stored_entries())
def test_any_entry_round_trips(entry: Entry) -> None:
    """Every encodable entry decodes to itself against its own material."""
    encoded = entries.encode(entry)
    assert len(encoded) == entry.nbytes
    assert entries.decode(encoded, entry.material) == entry


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_single_byte_flip_is_rejected_as_corrupt(mask: int) -> None:
    """Flipping bits of any one byte, header, material, payload or checksum, is 'corrupt'."""
    for i in range(len(ENCODED)):
        damaged = bytearray(ENCODED)
        damaged[i] ^= mask
        assert reason(bytes(damaged)) == "corrupt", f"flip at byte {i}"


def test_every_truncation_is_rejected_as_corrupt() -> None:
    """Any prefix of a value (a torn write) is 'corrupt'."""
    for n in range(len(ENCODED)):
        assert reason(ENCODED[:n]) == "corrupt", f"truncated to {n} bytes"


def test_trailing_bytes_are_rejected_as_corrupt() -> None:
    """A value with bytes appended is 'corrupt'."""
    assert reason(ENCODED + b"\x00") == "corrupt"
    assert reason(ENCODED + ENCODED) == "corrupt"


def test_entry_of_another_key_is_rejected_as_foreign() -> None:
    """A valid entry read under a different key's material is 'foreign'."""
    assert reason(ENCODED, MATERIAL + b"x") == "foreign"
    assert reason(ENCODED, MATERIAL[:-1]) == "foreign"
    assert reason(ENCODED, b"") == "foreign"


def _reseal(body: bytes) -> bytes:
    """A body with a *valid* checksum, so only the format check can reject it."""
    return body + blake3(body).digest()


def test_unknown_codec_version_is_rejected_even_with_a_valid_checksum() -> None:
    """A value written by a future codec version is 'corrupt', not misread."""
    body = bytearray(ENCODED[:-32])
    assert body[3] == CODEC_VERSION
    body[3] = CODEC_VERSION + 1
    assert reason(_reseal(bytes(body))) == "corrupt"


def test_unknown_magic_is_rejected_even_with_a_valid_checksum() -> None:
    """A value that is not an infercache entry is 'corrupt'."""
    assert reason(_reseal(b"XYZ" + ENCODED[3:-32])) == "corrupt"


def test_inconsistent_lengths_are_rejected_even_with_a_valid_checksum() -> None:
    """Material/payload lengths that do not tile the value are 'corrupt'."""
    body = bytearray(ENCODED[:-32])
    # material_len is the u32 after magic(3) version(1) created(8) ttl(4) epoch(8) 3*u32.
    offset = 3 + 1 + 8 + 4 + 8 + 12
    (mlen,) = struct.unpack_from(">I", body, offset)
    struct.pack_into(">I", body, offset, mlen + 1)
    assert reason(_reseal(bytes(body))) == "corrupt"


def test_arbitrary_bytes_are_rejected() -> None:
    """Values that were never entries are 'corrupt'."""
    for junk in (b"", b"ICE", b"\x00" * 100, b"hello world" * 20):
        assert reason(junk) == "corrupt"
