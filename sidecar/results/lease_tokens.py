"""Lease tokens: what a MISS hands out and a Store must bring back.

A token binds one key digest to the invalidation epoch the sidecar had applied
when the computation started, and expires. It is signed (HMAC-SHA256, 128-bit
tag) with a per-deployment secret, so any sidecar of the fleet can verify a
token another one issued, and a client cannot forge a newer epoch.

    version u8 | digest 32 B | epoch u64 | expires_at_ms u64 | lease id 16 B | tag 16 B

A token this signer issued itself is remembered (the last ISSUED_MEMORY of them, until
the secret changes), and one brought back byte for byte is verified without computing
its tag again: its bytes are the ones that were signed. Why: the gateway stores
through the sidecar that leased, and the HMAC was the largest single cost of its
store (~50 us of a miss at concurrency 1; OpenSSL's code is cold after each wait).
"""

from __future__ import annotations

import hmac
import os
import struct
from collections import OrderedDict
from dataclasses import dataclass

from sidecar.errors import FailedPrecondition, InvalidArgument
from sidecar.keys import KeyDigest

_VERSION = 1
_BODY = struct.Struct(">B32sQQ16s")
_TAG_LEN = 16
TOKEN_LEN = _BODY.size + _TAG_LEN
ISSUED_MEMORY = 4096
"""Tokens a signer remembers having issued (about 300 bytes each, ~1.2 MB in all)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A verified lease."""

    digest: KeyDigest
    epoch: int
    expires_at_ms: int
    lease_id: bytes


class LeaseSigner:
    """Issues and verifies lease tokens with one secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("lease secret must be at least 16 bytes")
        self._secret = secret
        self._issued: OrderedDict[bytes, Lease] = OrderedDict()

    @property
    def secret(self) -> bytes:
        """The secret leases are signed with."""
        return self._secret

    def rekey(self, secret: bytes) -> None:
        """Sign and verify with `secret` from now on (leases of the old one stop verifying)."""
        if len(secret) < 16:
            raise ValueError("lease secret must be at least 16 bytes")
        self._secret = secret
        self._issued.clear()  # signed with the old secret: they must stop verifying

    def issue(self, digest: KeyDigest, epoch: int, expires_at_ms: int) -> tuple[Lease, bytes]:
        """A new lease and its token."""
        lease = draft(digest, epoch, expires_at_ms)
        return lease, self.seal(lease)

    def seal(self, lease: Lease) -> bytes:
        """The token of a lease `draft` made (signed now, remembered as issued here)."""
        body = _BODY.pack(_VERSION, lease.digest, lease.epoch, lease.expires_at_ms, lease.lease_id)
        token = body + self._tag(body)
        issued = self._issued
        issued[token] = lease
        if len(issued) > ISSUED_MEMORY:
            issued.popitem(last=False)
        return token

    def verify(self, token: bytes, digest: KeyDigest, now_ms: int) -> Lease:
        """The lease in a token; InvalidArgument if forged or for another key,
        FailedPrecondition if expired."""
        mine = self._issued.get(token)
        if mine is not None:
            if mine.digest != digest:
                raise InvalidArgument("lease", "was issued for a different key")
            _check_expiry(mine.expires_at_ms, now_ms)
            return mine
        if len(token) != TOKEN_LEN:
            raise InvalidArgument("lease", "is not a lease token from this deployment")
        body, tag = token[: _BODY.size], token[_BODY.size :]
        if not hmac.compare_digest(tag, self._tag(body)):
            raise InvalidArgument("lease", "signature does not verify (forged or other deployment)")
        version, lease_digest, epoch, expires, lease_id = _BODY.unpack(body)
        if version != _VERSION:
            raise InvalidArgument("lease", f"unknown lease version {version}")
        if lease_digest != digest:
            raise InvalidArgument("lease", "was issued for a different key")
        _check_expiry(expires, now_ms)
        return Lease(KeyDigest(lease_digest), epoch, expires, lease_id)

    def _tag(self, body: bytes) -> bytes:
        # One call into OpenSSL (hmac.new builds a Python object around it first).
        return hmac.digest(self._secret, body, "sha256")[:_TAG_LEN]


def draft(digest: KeyDigest, epoch: int, expires_at_ms: int) -> Lease:
    """A new lease without its token: what a read that may take the key's hold needs
    (its lease id). Sealing it (LeaseSigner.seal) is left to the reads that find the key
    absent, so a hit costs no signature."""
    return Lease(digest, epoch, expires_at_ms, os.urandom(16))


def _check_expiry(expires_at_ms: int, now_ms: int) -> None:
    if expires_at_ms <= now_ms:
        raise FailedPrecondition(
            "lease expired: the computation took longer than INFERCACHE_LEASE_TTL_S; "
            "look the key up again for a fresh lease"
        )
