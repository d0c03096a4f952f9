"""Trust domains: one KV pool per set of tenants, and attachments bound to their tenants.

A trust domain is a set of tenants whose blocks may share one pool, because the model
processes serving any of them are trusted with all of them. With
INFERCACHE_KV_TRUST_DOMAINS (`acme=acme,initech;globex=globex`) every domain gets its
own hot tier: its own pool file and generations file in its own directory
(`INFERCACHE_KV_SHM_DIR/<domain>/`, or its own CUDA allocation), its own slots and
leases. Blocks of different domains never share memory, so a process that can map
one domain's pool can read or write nothing of another's.

Attaching binds: AttachHotTier names the tenants the process will use (all in one
domain) and proves it may use that domain's pool with the domain's key, a random
secret the sidecar writes at start into `<domain dir>/infercache-kv-domain.key`,
readable exactly by whoever can open that directory's pool file (file modes and
mounts decide who: docs/security.md). Every LookupPrefix and CommitBlocks naming a
tenant the attachment was not granted is PERMISSION_DENIED (kv/attachments.py).

Without the setting there is one domain of every tenant (one pool, no key, today's
layout): an attachment that names tenants is still held to them (a confused client
is stopped), one that names none may use any.
"""

from __future__ import annotations

import contextlib
import hmac
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from sidecar.errors import PermissionDenied
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.layout import KvLayout
from sidecar.kv.movement import KvStats
from sidecar.kv.types import (
    Attachment,
    AttachmentView,
    DomainSpec,
    KvSettings,
    LeaseView,
    PoolInfo,
    PrefixResult,
)

log = structlog.get_logger("infercache.kv")

KEY_FILE = "infercache-kv-domain.key"


def write_key(directory: str) -> bytes:
    """A fresh random key in `directory`/KEY_FILE (mode 0400, replacing a previous run's)."""
    key = os.urandom(32)
    path = os.path.join(directory, KEY_FILE)
    temporary = os.path.join(directory, f".{KEY_FILE}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
    try:
        os.write(fd, key.hex().encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return key


@dataclass(slots=True)
class TrustDomain:
    """One domain: its tenants (None: every tenant), its tier and its key (None: none)."""

    name: str
    tenants: frozenset[str] | None
    tier: KvHotTier
    key: bytes | None = None
    key_path: str = ""

    def admits(self, tenants: frozenset[str]) -> bool:
        """Whether every tenant belongs here."""
        return self.tenants is None or tenants <= self.tenants


class KvDomains:
    """KvCacheService's domain: routes each attachment to its trust domain's hot tier."""

    def __init__(self, domains: Sequence[TrustDomain], stats: KvStats) -> None:
        if not domains:
            raise ValueError("at least one trust domain")
        self.domains = list(domains)
        self.stats = stats
        self.settings: KvSettings = domains[0].tier.settings
        self._configured = domains[0].tenants is not None

    @classmethod
    def single(cls, tier: KvHotTier) -> KvDomains:
        """One domain of every tenant (no INFERCACHE_KV_TRUST_DOMAINS)."""
        return cls([TrustDomain("", None, tier)], tier.stats)

    def _domain_for(self, tenants: frozenset[str], key: bytes) -> TrustDomain:
        if not self._configured:
            return self.domains[0]
        if not tenants:
            self._refuse("no tenants")
            raise PermissionDenied(
                "AttachHotTier must name the tenants this process will use (tenants): "
                "the sidecar keeps trust domains apart (INFERCACHE_KV_TRUST_DOMAINS)"
            )
        domain = next((d for d in self.domains if d.admits(tenants)), None)
        if domain is None:
            self._refuse("no domain")
            raise PermissionDenied(
                f"tenants {sorted(tenants)[:8]} are not all in one KV trust domain "
                "(INFERCACHE_KV_TRUST_DOMAINS); attach once per domain"
            )
        assert domain.key is not None
        if not hmac.compare_digest(key, domain.key.hex().encode()):
            self._refuse("wrong key")
            raise PermissionDenied(
                f"domain_key is not trust domain {domain.name!r}'s: send the content of "
                f"{domain.key_path} (it changes whenever the sidecar starts)"
            )
        return domain

    def _refuse(self, why: str) -> None:
        self.stats.tenants_refused += 1
        log.warning("kv_attach_refused", reason=why)

    async def attach(
        self,
        fingerprint: str,
        adapter: str,
        layout: KvLayout,
        *,
        tenants: Sequence[str] = (),
        domain_key: bytes = b"",
        gpu_uuid: str = "",
        process_name: str = "",
    ) -> tuple[Attachment, PoolInfo, str]:
        """Attach to the trust domain of `tenants`, bound to them (see KvHotTier.attach);
        also the domain's name."""
        wanted = frozenset(tenants)
        domain = self._domain_for(wanted, domain_key)
        a, pool = await domain.tier.attach(
            fingerprint,
            adapter,
            layout,
            gpu_uuid=gpu_uuid,
            process_name=process_name,
            tenants=wanted or None,
        )
        return a, pool, domain.name

    def tier_of(self, attachment_id: str) -> KvHotTier:
        """The tier holding an attachment (the first one when none does: it answers
        FailedPrecondition for the unknown id)."""
        if len(self.domains) > 1:
            for d in self.domains:
                if d.tier.attachments.find(attachment_id) is not None:
                    return d.tier
        return self.domains[0].tier

    async def detach(self, attachment_id: str) -> int:
        """See KvHotTier.detach."""
        return await self.tier_of(attachment_id).detach(attachment_id)

    async def keep_alive(self, attachment_id: str) -> AttachmentView:
        """See KvHotTier.keep_alive."""
        return await self.tier_of(attachment_id).keep_alive(attachment_id)

    async def release(self, attachment_id: str, lease_id: str) -> int:
        """See KvHotTier.release."""
        return await self.tier_of(attachment_id).release(attachment_id, lease_id)

    async def renew(self, attachment_id: str, lease_id: str, ttl_ms: int) -> LeaseView:
        """See KvHotTier.renew."""
        return await self.tier_of(attachment_id).renew(attachment_id, lease_id, ttl_ms)

    async def lookup_prefix(
        self,
        attachment_id: str,
        tenant: str,
        cache_salt: str,
        hashes: Sequence[bytes],
        *,
        lease_ttl_ms: int = 0,
        hot_only: bool = False,
    ) -> PrefixResult:
        """See KvHotTier.lookup_prefix."""
        return await self.tier_of(attachment_id).lookup_prefix(
            attachment_id, tenant, cache_salt, hashes, lease_ttl_ms=lease_ttl_ms, hot_only=hot_only
        )

    async def allocate(
        self, attachment_id: str, count: int, *, lease_id: str = "", lease_ttl_ms: int = 0
    ) -> tuple[list[int], LeaseView, list[int]]:
        """See KvHotTier.allocate; also the slots' generations."""
        tier = self.tier_of(attachment_id)
        slots, lease = await tier.allocate(
            attachment_id, count, lease_id=lease_id, lease_ttl_ms=lease_ttl_ms
        )
        return slots, lease, tier.generations(slots)

    async def commit(
        self,
        attachment_id: str,
        lease_id: str,
        tenant: str,
        cache_salt: str,
        blocks: Sequence[tuple[int, bytes]],
    ) -> list[bool]:
        """See KvHotTier.commit."""
        tier = self.tier_of(attachment_id)
        return await tier.commit(attachment_id, lease_id, tenant, cache_salt, blocks)

    async def settled(self) -> None:
        """Wait for every domain's background work."""
        for d in self.domains:
            await d.tier.settled()

    async def close(self) -> None:
        """Close every domain's tier and remove its key file."""
        for d in self.domains:
            await d.tier.close()
            if d.key_path:
                with contextlib.suppress(OSError):
                    os.unlink(d.key_path)


def build_domains(
    specs: Sequence[DomainSpec],
    shm_dir: str,
    make_tier: Callable[[str], KvHotTier],
    stats: KvStats,
) -> KvDomains:
    """The domains of `specs` (none: one domain of every tenant in `shm_dir`), each with
    its tier made by make_tier(directory of its files) and, when configured, its
    directory `shm_dir/<name>` (made 0700 when missing; an existing one keeps the
    operator's owner and mode) and key file."""
    if not specs:
        return KvDomains.single(make_tier(shm_dir))
    domains = []
    for name, tenants in specs:
        directory = os.path.join(shm_dir, name)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.path.islink(directory) or not os.path.isdir(directory):
            raise ValueError(f"{directory} (trust domain {name!r}) is not a directory")
        key = write_key(directory)
        path = os.path.join(directory, KEY_FILE)
        domains.append(TrustDomain(name, frozenset(tenants), make_tier(directory), key, path))
        log.info("kv_trust_domain", domain=name, tenants=len(tenants), directory=directory)
    return KvDomains(domains, stats)
