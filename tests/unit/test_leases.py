"""Lease tokens: signed, bound to one key and epoch, expiring."""

from __future__ import annotations

import hashlib
import hmac
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import FailedPrecondition, InvalidArgument
from sidecar.keys import KeyDigest
from sidecar.results.lease_tokens import ISSUED_MEMORY, TOKEN_LEN, LeaseSigner

SECRET = b"s" * 32
DIGEST = KeyDigest(hashlib.sha256(b"key").digest())
OTHER = KeyDigest(hashlib.sha256(b"other key").digest())
NOW = 1_700_000_000_000
BODY = struct.Struct(">B32sQQ16s")


def test_issue_then_verify_round_trips() -> None:
    """A fresh token verifies and yields the digest, epoch, expiry and id it was issued with."""
    signer = LeaseSigner(SECRET)
    lease, token = signer.issue(DIGEST, 42, NOW + 60_000)
    assert len(token) == TOKEN_LEN
    assert signer.verify(token, DIGEST, NOW) == lease
    assert lease.epoch == 42
    assert lease.expires_at_ms == NOW + 60_000


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_any_epoch_survives(epoch: int) -> None:
    """Epochs up to 2**64-1 come back unchanged."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, epoch, NOW + 1)
    assert signer.verify(token, DIGEST, NOW).epoch == epoch


def test_another_sidecar_with_the_same_secret_verifies() -> None:
    """Any sidecar of the deployment (same secret) accepts a token another one issued."""
    _, token = LeaseSigner(SECRET).issue(DIGEST, 3, NOW + 1000)
    assert LeaseSigner(bytes(SECRET)).verify(token, DIGEST, NOW).epoch == 3


def test_each_issue_has_a_new_lease_id() -> None:
    """Two leases for the same key and epoch are distinguishable (holder release needs it)."""
    signer = LeaseSigner(SECRET)
    a, ta = signer.issue(DIGEST, 1, NOW + 1000)
    b, tb = signer.issue(DIGEST, 1, NOW + 1000)
    assert a.lease_id != b.lease_id
    assert ta != tb


@pytest.mark.parametrize("position", range(TOKEN_LEN))
def test_tampering_any_byte_is_refused(position: int) -> None:
    """Flipping any single byte (body or tag) makes the token INVALID_ARGUMENT."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 7, NOW + 60_000)
    tampered = bytearray(token)
    tampered[position] ^= 0x01
    with pytest.raises(InvalidArgument) as info:
        signer.verify(bytes(tampered), DIGEST, NOW)
    assert info.value.field == "lease"


def test_raising_the_epoch_is_refused() -> None:
    """A client cannot re-sign a newer epoch to dodge STALE_LEASE."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 7, NOW + 60_000)
    version, digest, _, expires, lease_id = BODY.unpack(token[: BODY.size])
    forged = BODY.pack(version, digest, 10**6, expires, lease_id) + token[BODY.size :]
    with pytest.raises(InvalidArgument):
        signer.verify(forged, DIGEST, NOW)


@pytest.mark.parametrize("length", [0, 1, TOKEN_LEN - 1, TOKEN_LEN + 1, 2 * TOKEN_LEN])
def test_wrong_length_is_refused(length: int) -> None:
    """Truncated, padded or empty tokens are INVALID_ARGUMENT, not an exception."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 7, NOW + 60_000)
    bad = (token * 2)[:length]
    with pytest.raises(InvalidArgument):
        signer.verify(bad, DIGEST, NOW)


def test_wrong_digest_is_refused() -> None:
    """A valid token for one key cannot store another key."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 7, NOW + 60_000)
    with pytest.raises(InvalidArgument, match="different key"):
        signer.verify(token, OTHER, NOW)


def test_wrong_secret_is_refused() -> None:
    """A token signed by another deployment does not verify."""
    _, token = LeaseSigner(b"t" * 32).issue(DIGEST, 7, NOW + 60_000)
    with pytest.raises(InvalidArgument, match="signature"):
        LeaseSigner(SECRET).verify(token, DIGEST, NOW)


def test_expiry_boundary() -> None:
    """Valid until the millisecond before expires_at_ms; FAILED_PRECONDITION from then on."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 7, NOW)
    assert signer.verify(token, DIGEST, NOW - 1).epoch == 7
    with pytest.raises(FailedPrecondition):
        signer.verify(token, DIGEST, NOW)
    with pytest.raises(FailedPrecondition):
        signer.verify(token, DIGEST, NOW + 10**9)


def test_unknown_version_with_a_valid_signature_is_refused() -> None:
    """A correctly signed token of an unknown format version is still refused."""
    signer = LeaseSigner(SECRET)
    body = BODY.pack(2, DIGEST, 7, NOW + 60_000, b"\x00" * 16)
    tag = hmac.new(SECRET, body, hashlib.sha256).digest()[:16]
    with pytest.raises(InvalidArgument, match="version"):
        signer.verify(body + tag, DIGEST, NOW)


def test_documented_layout() -> None:
    """The token is version | digest | epoch | expires | id | HMAC-SHA256[:16] of the body."""
    signer = LeaseSigner(SECRET)
    lease, token = signer.issue(DIGEST, 9, NOW + 5)
    body = token[: BODY.size]
    assert BODY.unpack(body) == (1, DIGEST, 9, NOW + 5, lease.lease_id)
    assert token[BODY.size :] == hmac.new(SECRET, body, hashlib.sha256).digest()[:16]


def test_short_secret_is_refused() -> None:
    """A secret shorter than 16 bytes is a configuration error."""
    with pytest.raises(ValueError, match="16 bytes"):
        LeaseSigner(b"short")


def test_a_token_issued_here_is_verified_without_its_tag_computed_again() -> None:
    """The signer remembers what it issued: the same bytes come back verified with no
    HMAC; a token it did not issue (another sidecar's) is still checked by its tag."""
    signer = LeaseSigner(SECRET)
    lease, token = signer.issue(DIGEST, 5, NOW + 1000)
    tags: list[bytes] = []
    real_tag = signer._tag

    def counted(body: bytes) -> bytes:
        tags.append(body)
        return real_tag(body)

    signer._tag = counted  # type: ignore[method-assign]
    assert signer.verify(token, DIGEST, NOW) == lease
    assert tags == []
    _, foreign = LeaseSigner(SECRET).issue(DIGEST, 6, NOW + 1000)
    assert signer.verify(foreign, DIGEST, NOW).epoch == 6
    assert len(tags) == 1


def test_a_remembered_token_is_still_bound_to_its_key_and_its_expiry() -> None:
    """Remembering skips only the tag: another key or a late store is refused as before."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 5, NOW + 1000)
    with pytest.raises(InvalidArgument):
        signer.verify(token, OTHER, NOW)
    with pytest.raises(FailedPrecondition):
        signer.verify(token, DIGEST, NOW + 1000)


def test_a_new_secret_forgets_the_tokens_of_the_old_one() -> None:
    """After rekey, a token issued (and remembered) under the old secret stops verifying."""
    signer = LeaseSigner(SECRET)
    _, token = signer.issue(DIGEST, 5, NOW + 1000)
    signer.rekey(b"t" * 32)
    with pytest.raises(InvalidArgument):
        signer.verify(token, DIGEST, NOW)


def test_the_memory_of_issued_tokens_is_bounded() -> None:
    """Only the last ISSUED_MEMORY tokens are remembered; an older one still verifies by
    its tag."""
    signer = LeaseSigner(SECRET)
    _, first = signer.issue(DIGEST, 1, NOW + 1000)
    for _ in range(ISSUED_MEMORY):
        signer.issue(DIGEST, 2, NOW + 1000)
    assert len(signer._issued) == ISSUED_MEMORY
    assert first not in signer._issued
    assert signer.verify(first, DIGEST, NOW).epoch == 1
