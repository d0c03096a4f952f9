"""Stored entries: the codec round-trips and every damaged or misplaced value is rejected."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from blake3 import blake3
from hypothesis import given

from sidecar import entries
from sidecar.entries import CODEC_VERSION, ChunkMeta, ComputeCost, Entry, EntryRejected, pack_chunks
from sidecar.macs import LOCAL, FleetKeys
from tests.support.strategies.entries import stored_entries, streamed_entries

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
def test_every_single_byte_flip_is_rejected(mask: int) -> None:
    """Flipping bits of any one byte, header, material, payload or tag, is refused: as
    'corrupt' where the layout breaks, else as 'forged' (the tag no longer verifies)."""
    for i in range(len(ENCODED)):
        damaged = bytearray(ENCODED)
        damaged[i] ^= mask
        assert reason(bytes(damaged)) in ("corrupt", "forged"), f"flip at byte {i}"


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
    """A body with a *valid* tag, so only the format check can reject it."""
    return body + blake3(body, key=LOCAL.signing_key("entry")).digest()


def test_unknown_codec_version_is_rejected_even_with_a_valid_tag() -> None:
    """A value written by a future codec version is 'corrupt', not misread."""
    body = bytearray(ENCODED[:-32])
    assert body[3] == 3  # an entry without chunks is written in the plain layout
    body[3] = CODEC_VERSION + 1
    assert reason(_reseal(bytes(body))) == "corrupt"


def test_unknown_magic_is_rejected_even_with_a_valid_tag() -> None:
    """A value that is not an infercache entry is 'corrupt'."""
    assert reason(_reseal(b"XYZ" + ENCODED[3:-32])) == "corrupt"


def test_inconsistent_lengths_are_rejected_even_with_a_valid_tag() -> None:
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


CHUNKED = Entry(
    material=MATERIAL,
    payload=b"The answer is 42.",
    created_at_ms=1_700_000_000_123,
    ttl_s=600,
    epoch=7,
    cost=ComputeCost(latency_ms=850, prompt_tokens=120, completion_tokens=5),
    chunk_table=pack_chunks(
        [ChunkMeta(4, 1, 0), ChunkMeta(7, 2, 40), ChunkMeta(4, 1, 95), ChunkMeta(2, 1, 95)]
    ),
    finish_reason="stop",
)
CHUNKED_ENCODED = entries.encode(CHUNKED)

# A v1 value exactly as main's codec wrote it at 88bc6e9: an unkeyed BLAKE3 checksum
# that anyone can recompute (issue 25: a forged entry was served as a hit).
_V1_BODY = (
    struct.pack(
        ">3sBQIQIIIII", b"ICE", 1, 1_700_000_000_123, 600, 2**62, 850, 120, 33, len(MATERIAL), 6
    )
    + MATERIAL
    + b"forged"
)
V1_BYTES = _V1_BODY + blake3(_V1_BODY).digest()


def test_an_unkeyed_v1_entry_with_a_recomputed_checksum_is_forged() -> None:
    """The 88bc6e9 format (public checksum) proves nothing: refused as 'forged'."""
    assert reason(V1_BYTES) == "forged"


def test_a_plain_entry_is_written_as_v3_with_a_keyed_tag() -> None:
    """Entries without chunks use the v3 layout; the tag is keyed BLAKE3 of the body."""
    assert ENCODED[3] == 3
    assert ENCODED[-32:] == blake3(ENCODED[:-32], key=LOCAL.signing_key("entry")).digest()
    assert ENCODED[-32:] != blake3(ENCODED[:-32]).digest()


def test_an_entry_resealed_with_an_unkeyed_checksum_is_forged() -> None:
    """Rewriting payload and epoch and recomputing an unkeyed checksum does not verify."""
    body = bytearray(ENCODED[:-32])
    struct.pack_into(">Q", body, 3 + 1 + 8 + 4, 2**62)
    assert reason(bytes(body) + blake3(bytes(body)).digest()) == "forged"


def test_an_entry_of_another_fleet_is_forged() -> None:
    """A value signed under a different fleet secret is 'forged'."""
    other = FleetKeys([b"another fleet's secret, 32 bytes or more"])
    assert reason(entries.encode(ENTRY, other)) == "forged"


def test_rotation_new_key_signs_both_keys_verify_old_alone_refuses() -> None:
    """[new, old] verifies values of either and signs with new; [new] alone refuses old."""
    old, new = b"the old fleet secret, 32 bytes or more", b"the new fleet secret, 32 bytes or more"
    by_old = entries.encode(ENTRY, FleetKeys([old]))
    rotating = FleetKeys([new, old])
    assert entries.decode(by_old, MATERIAL, rotating) == ENTRY
    by_rotating = entries.encode(ENTRY, rotating)
    assert entries.decode(by_rotating, MATERIAL, FleetKeys([new])) == ENTRY
    with pytest.raises(EntryRejected) as err:
        entries.decode(by_old, MATERIAL, FleetKeys([new]))
    assert err.value.reason == "forged"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"epoch": 8}, "future_epoch"),
        ({"ttl_s": 601}, "ttl"),
        ({"created_at_ms": 1_700_000_000_123 + entries.CLOCK_SKEW_MS + 1}, "future"),
    ],
)
def test_check_bounds_refuses_epoch_ttl_and_creation_beyond_the_fleet(
    change: dict[str, Any], why: str
) -> None:
    """An epoch above the store's, a TTL above the maximum or a creation time in the
    future (beyond the skew allowance) is refused with its reason."""
    import dataclasses

    entries.check_bounds(ENTRY, 1_700_000_000_123, 7, 600)
    with pytest.raises(EntryRejected) as err:
        entries.check_bounds(dataclasses.replace(ENTRY, **change), 1_700_000_000_123, 7, 600)
    assert err.value.reason == why


def test_chunked_entry_round_trips_as_v4() -> None:
    """Chunk boundaries, token counts, offsets and the finish reason survive encoding."""
    assert CHUNKED_ENCODED[3] == 4
    decoded = entries.decode(CHUNKED_ENCODED, MATERIAL)
    assert decoded == CHUNKED
    assert [(m.size_bytes, m.tokens, m.offset_ms, d) for m, d in decoded.chunks()] == [
        (4, 1, 0, b"The "),
        (7, 2, 40, b"answer "),
        (4, 1, 95, b"is 4"),
        (2, 1, 95, b"2."),
    ]
    assert decoded.chunk_count == 4
    assert CHUNKED.nbytes == len(CHUNKED_ENCODED)


def test_unchunked_entry_replays_as_one_chunk() -> None:
    """A plain Store's entry is one chunk holding the payload and its completion tokens."""
    assert [(m.size_bytes, m.tokens, d) for m, d in ENTRY.chunks()] == [(17, 33, ENTRY.payload)]
    assert ENTRY.chunk_count == 1


def test_v2_damage_and_truncation_are_rejected() -> None:
    """Any flipped byte of a chunked entry is refused, any prefix is 'corrupt'."""
    for i in range(len(CHUNKED_ENCODED)):
        damaged = bytearray(CHUNKED_ENCODED)
        damaged[i] ^= 0x01
        assert reason(bytes(damaged)) in ("corrupt", "forged"), f"flip at byte {i}"
    for n in range(len(CHUNKED_ENCODED)):
        assert reason(CHUNKED_ENCODED[:n]) == "corrupt", f"truncated to {n} bytes"


def test_chunk_table_that_does_not_tile_the_payload_is_corrupt_even_when_sealed() -> None:
    """A validly checksummed v2 value whose chunk sizes miss the payload is refused."""
    body = bytearray(CHUNKED_ENCODED[:-32])
    table_at = 3 + 1 + 8 + 4 + 8 + 12 + 8 + 4 + 1 + len(MATERIAL) + len(b"stop")
    struct.pack_into(">I", body, table_at, 5)  # first chunk 4 -> 5 bytes
    assert reason(_reseal(bytes(body))) == "corrupt"


def test_encode_refuses_a_table_that_does_not_tile_the_payload() -> None:
    """The codec never writes a chunk table whose sizes disagree with the payload."""
    bad = Entry(MATERIAL, b"abc", 1, 1, chunk_table=pack_chunks([ChunkMeta(2)]))
    with pytest.raises(ValueError, match="tile"):
        entries.encode(bad)


def test_chunked_entry_under_another_key_is_foreign() -> None:
    """Material checking applies to v2 entries too."""
    assert reason(CHUNKED_ENCODED, MATERIAL + b"x") == "foreign"


def test_decode_by_digest_accepts_only_material_hashing_to_the_digest() -> None:
    """Without the key, a value proves itself by its material hashing to the digest."""
    import hashlib

    digest = hashlib.sha256(MATERIAL).digest()
    assert entries.decode_by_digest(CHUNKED_ENCODED, digest) == CHUNKED
    with pytest.raises(EntryRejected) as err:
        entries.decode_by_digest(CHUNKED_ENCODED, bytes(32))
    assert err.value.reason == "foreign"


def test_peek_reads_both_layouts() -> None:
    """Reclaim's peek finds epoch and material in v1 and v2 heads."""
    assert entries.peek(ENCODED[:200]) == (7, MATERIAL)
    assert entries.peek(CHUNKED_ENCODED[:200]) == (7, MATERIAL)


@given(streamed_entries())
def test_any_chunked_entry_round_trips(entry: Entry) -> None:
    """Every encodable chunked entry decodes to itself, chunks in order."""
    encoded = entries.encode(entry)
    assert len(encoded) == entry.nbytes
    decoded = entries.decode(encoded, entry.material)
    assert decoded == entry
    assert b"".join(d for _, d in decoded.chunks()) == entry.payload
