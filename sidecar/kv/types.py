"""Values of the KV hot tier: settings, attachments, results, and input checks."""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from dataclasses import dataclass

from sidecar.errors import FailedPrecondition, InvalidArgument
from sidecar.kv.generations import GenerationsExport
from sidecar.kv.layout import MAX_HASH_BYTES, MAX_TEXT, KvLayout
from sidecar.kv.pool import PoolLocation

DomainSpec = tuple[str, tuple[str, ...]]
"""A KV trust domain: (its name, its tenants)."""
_DOMAIN_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_TENANT = re.compile(r"[^\s,;=]{1,256}")


@dataclass(frozen=True, slots=True)
class KvSettings:
    """Limits and sizes of the KV hot tier, built by `KvConfig.to_settings()` (the
    settings' defaults are declared there, once)."""

    pool_bytes: int
    slot_bytes: int
    """0: the first attachment's block size."""
    promote_timeout_ms: int
    warm_ttl_s: int
    default_lease_ms: int
    max_lease_ms: int
    max_chain_blocks: int
    attachment_ttl_ms: int = 30000
    max_attachments: int = 256
    verify_hits: float = 0.1
    """Fraction of prefix hits whose blocks are checked against their seals first."""
    # Not a setting: an internal bound on what one sidecar tracks.
    max_leases: int = 65536

    def pool_shape(self, block_bytes: int) -> tuple[int, int]:
        """(slots, bytes per slot) of a pool whose first attachment has `block_bytes`
        blocks; FailedPrecondition when the pool cannot hold one slot."""
        slot_bytes = self.slot_bytes or block_bytes
        num_slots = self.pool_bytes // slot_bytes
        if num_slots < 1:
            raise FailedPrecondition(
                f"INFERCACHE_KV_POOL_BYTES ({self.pool_bytes}) cannot hold one "
                f"slot of {slot_bytes} bytes"
            )
        return num_slots, slot_bytes


@dataclass(slots=True)
class Attachment:
    """A model process attached with one fingerprint, adapter and layout."""

    attachment_id: str
    fingerprint: str
    adapter: str
    layout: KvLayout
    scope: bytes
    version: str
    process_name: str
    tenants: frozenset[str] | None = None
    """The tenants granted at attach (None: any tenant of its trust domain's pool)."""
    superseded: bool = False
    expires_at: float = 0.0
    """Monotonic seconds; renewed by every call of the attachment."""


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """What a model process needs to map the pool."""

    pool_id: str
    num_slots: int
    slot_bytes: int
    location: PoolLocation
    generations: GenerationsExport | None = None
    """The slots' generations, when shared with model processes."""


@dataclass(frozen=True, slots=True)
class LeaseView:
    """A lease as clients see it."""

    lease_id: str
    expires_at_unix_ms: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class PrefixResult:
    """Slots of the longest cached prefix, pinned under lease (None when nothing matched)."""

    slots: list[int]
    lease: LeaseView | None
    retry_later: bool
    retry_after_ms: int
    promoted: int
    generations: list[int]
    """Per slot, its generation now (a reader re-checks it after copying)."""


@dataclass(frozen=True, slots=True)
class AttachmentView:
    """An attachment's liveness as clients see it."""

    expires_at_unix_ms: int
    ttl_ms: int


def check_text(field: str, value: str, *, required: bool) -> None:
    if required and not value:
        raise InvalidArgument(field, "is required")
    if len(value) > MAX_TEXT:
        raise InvalidArgument(field, f"is longer than {MAX_TEXT} characters")


def check_hashes(field: str, hashes: Sequence[bytes]) -> None:
    if not hashes:
        return
    lengths = list(map(len, hashes))
    if min(lengths) > 0 and max(lengths) <= MAX_HASH_BYTES:
        return
    for i, h in enumerate(hashes):
        if not 0 < len(h) <= MAX_HASH_BYTES:
            raise InvalidArgument(f"{field}[{i}]", f"must be 1..{MAX_HASH_BYTES} bytes")


def check_commit(blocks: Sequence[tuple[int, bytes]], allocated: Set[int]) -> None:
    """Each (slot, hash) to commit: a distinct slot still `allocated` (uncommitted) under
    the lease, and a hash of 1..MAX_HASH_BYTES bytes."""
    seen: set[int] = set()
    for i, (slot, h) in enumerate(blocks):
        if slot not in allocated or slot in seen:
            raise InvalidArgument(
                f"blocks[{i}].slot_id",
                f"slot {slot} is not an uncommitted slot allocated under this lease",
            )
        seen.add(slot)
        if not 0 < len(h) <= MAX_HASH_BYTES:
            raise InvalidArgument(f"blocks[{i}].block_hash", f"must be 1..{MAX_HASH_BYTES} bytes")


def parse_trust_domains(text: str) -> tuple[DomainSpec, ...]:
    """`name=tenant[,tenant...][;name=...]`; "" = no domains. ValueError if malformed, a
    name repeats or a tenant is in two domains."""
    out: list[DomainSpec] = []
    seen: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, eq, tenants_text = (x.strip() for x in part.partition("="))
        if not eq or not _DOMAIN_NAME.fullmatch(name):
            raise ValueError(
                f"{part[:40]!r}: expected DOMAIN=TENANT[,TENANT...], a domain name of "
                "lower-case letters, digits, '-' and '_' (at most 32)"
            )
        if any(name == n for n, _ in out):
            raise ValueError(f"trust domain {name!r} is named twice")
        tenants = tuple(t.strip() for t in tenants_text.split(",") if t.strip())
        if not tenants:
            raise ValueError(f"trust domain {name!r} has no tenants")
        for t in tenants:
            if not _TENANT.fullmatch(t):
                raise ValueError(f"tenant {t[:40]!r} of trust domain {name!r} is not a name")
            if t in seen:
                raise ValueError(f"tenant {t!r} is in trust domains {seen[t]!r} and {name!r}")
            seen[t] = name
        out.append((name, tenants))
    return tuple(out)
