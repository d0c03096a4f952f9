"""The fleet secret's MAC keys: what lets a sidecar believe a value read from a shared store.

Every value the sidecar reads back from Redis (result entries, KV warm blocks, hit
records, rules and the rule-set head, audit records) carries a keyed BLAKE3 tag
(32 bytes) under a key derived from the fleet secret for that value's kind
(`blake3(secret, derive_key_context="infercache <purpose> v1")`), so a tag made for
one kind never verifies as another. What a tag covers binds the value to where it
lives (the key material or digest, the model version, the epoch; see each format).

Rotation: the first secret signs, every configured secret verifies (a new secret is
rolled out as [new, old], then alone). docs/security.md says who can do what.
"""

from __future__ import annotations

import hmac
import os
import struct
from collections.abc import Sequence

from blake3 import blake3

TAG_LEN = 32
"""Bytes of every tag."""
MIN_SECRET_BYTES = 32
"""A fleet secret shorter than this is refused (INFERCACHE_FLEET_SECRET_FILE)."""

PURPOSES = (
    "entry",
    "kv-block",
    "hit-record",
    "rule",
    "head",
    "audit",
    "lease",
    "tenant-salt",
    "verify-audit",
)
"""The kinds of value a tag is made for: one derived key each."""

_DEV_SECRET = b"infercache insecure development fleet secret: anyone can forge with it"
_LEN = struct.Struct(">Q")


class FleetKeys:
    """Per-purpose MAC keys of one fleet: `sign` with the first secret, `verify` with any."""

    __slots__ = ("_keys", "origin")

    def __init__(self, secrets: Sequence[bytes], *, origin: str = "file") -> None:
        """`secrets`: newest first (at most two while rotating); `origin` names where they
        came from ("file", "process", "insecure-dev") for the start-up log."""
        if not secrets:
            raise ValueError("at least one fleet secret is needed")
        self.origin = origin
        self._keys: dict[str, tuple[bytes, ...]] = {
            p: tuple(blake3(s, derive_key_context=f"infercache {p} v1").digest() for s in secrets)
            for p in PURPOSES
        }

    @classmethod
    def ephemeral(cls) -> FleetKeys:
        """A random secret for this process only (the embedded store: nothing is shared)."""
        return cls([os.urandom(32)], origin="process")

    @classmethod
    def insecure_dev(cls) -> FleetKeys:
        """A fixed public secret (INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET): sidecars of a
        development fleet agree, and anyone who can write to the store can forge."""
        return cls([_DEV_SECRET], origin="insecure-dev")

    @property
    def rotating(self) -> bool:
        """True while more than one secret verifies."""
        return len(self._keys["entry"]) > 1

    def signing_key(self, purpose: str) -> bytes:
        """The key that signs values of this purpose (a BLAKE3 key, 32 bytes)."""
        return self._keys[purpose][0]

    def keys(self, purpose: str) -> tuple[bytes, ...]:
        """Every key that verifies values of this purpose, signing key first."""
        return self._keys[purpose]

    def sign(self, purpose: str, *parts: bytes | memoryview) -> bytes:
        """The tag of `parts` (each length-prefixed, so no two part lists collide)."""
        return _tag(self._keys[purpose][0], parts)

    def verify(self, purpose: str, tag: bytes | memoryview, *parts: bytes | memoryview) -> bool:
        """True if `tag` is the tag of `parts` under any configured secret."""
        return any(hmac.compare_digest(_tag(k, parts), tag) for k in self._keys[purpose])

    def derived(self, purpose: str) -> bytes:
        """A 32-byte secret for a purpose that is not a tag (the lease signer's key, the
        tenants' cache_salt key)."""
        return self._keys[purpose][0]


def _tag(key: bytes, parts: Sequence[bytes | memoryview]) -> bytes:
    h = blake3(key=key)
    for part in parts:
        h.update(_LEN.pack(len(part)))
        h.update(part)
    return h.digest()


def read_secret_file(path: str) -> bytes:
    """The secret a file holds: its bytes without surrounding whitespace (so `openssl
    rand -base64 48 > file` works). ValueError if unreadable or shorter than 32 bytes."""
    try:
        with open(path, "rb") as f:
            secret = f.read(4096).strip()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"{path} holds {len(secret)} bytes; a fleet secret needs at least "
            f"{MIN_SECRET_BYTES} (create one with `openssl rand -base64 48`)"
        )
    return secret


LOCAL = FleetKeys.ephemeral()
"""This process's own keys: the default of components built without a fleet (tests,
benches, the embedded store)."""
