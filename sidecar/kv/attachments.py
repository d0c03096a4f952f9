"""Who is attached to the KV hot tier, and which model version is current.

An attachment is one model process with one fingerprint, adapter and KV layout. The
current version is the fingerprint attached last; attachments of any other are
superseded (they may still release and detach, nothing else). When the pod knows its
own weights' fingerprint, an attachment claiming other weights is refused unless
foreign fingerprints are allowed (INFERCACHE_ALLOW_FOREIGN_MODEL_STORE, the switch
that lets a Store claim another model). The pod's fingerprint is read live: once the
model files change, a fingerprint being re-measured is refused (attach, lookups,
stores), and after the swap the old one is foreign like any other.

Attachments are held by liveness: every RPC of an attachment, and RenewAttachment,
extends it by the attachment ttl (INFERCACHE_KV_ATTACHMENT_TTL_MS); one not heard
from that long belongs to a process that died or restarted without detaching, and
is reclaimed with its leases (the hot tier sweeps them). The table holds at most
INFERCACHE_KV_MAX_ATTACHMENTS; a full one answers RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Set

import structlog

from sidecar.errors import FailedPrecondition, PermissionDenied, ResourceExhausted
from sidecar.kv.block_events import BlockEvents
from sidecar.kv.expiry import ExpiryQueue
from sidecar.kv.layout import KvLayout, request_scope, version_scope, version_tag
from sidecar.kv.movement import KvStats
from sidecar.kv.types import Attachment, check_text

log = structlog.get_logger("infercache.kv")


class Attachments:
    """The live attachments of one KV hot tier and its current model version."""

    def __init__(
        self,
        max_attachments: int,
        stats: KvStats,
        *,
        ttl_ms: int = 30000,
        clock: Callable[[], float] = time.monotonic,
        pod_fingerprint: str | Callable[[], str] = "",
        allow_foreign: bool = False,
        doubt: Callable[[str, str], None] | None = None,
        events: BlockEvents | None = None,
    ) -> None:
        """`ttl_ms`: how long an attachment lives unheard from; `pod_fingerprint`: the
        weights this pod runs, or a function giving them now ("" = unknown: any
        fingerprint is accepted); `allow_foreign`: accept other fingerprints all the
        same; `doubt(fingerprint, adapter)`: raises FailedPrecondition while that
        fingerprint is being re-measured; `events` hears the request scopes
        request_prefix makes (what a KV event names a block's scope by)."""
        self._max = max_attachments
        self.ttl_ms = ttl_ms
        self._clock = clock
        self._expiry = ExpiryQueue()
        self._stats = stats
        fixed = pod_fingerprint
        self._pod_fingerprint = fixed if callable(fixed) else (lambda: fixed)
        self._allow_foreign = allow_foreign
        self._doubt = doubt
        self._events = events
        self._by_id: dict[str, Attachment] = {}
        self.current: str | None = None
        """Version tag of the fingerprint attached last (None before the first)."""
        self.previous: str | None = None
        """The version current before it (its blocks are being demoted)."""

    def __len__(self) -> int:
        return len(self._by_id)

    def check_request(
        self, fingerprint: str, adapter: str, gpu_uuid: str, process_name: str
    ) -> None:
        """Refuse a malformed attach request, or one claiming weights this pod does not run.

        Asked before any pool is created: a refused attach costs nothing.
        """
        check_text("model_fingerprint", fingerprint, required=True)
        check_text("adapter_fingerprint", adapter, required=False)
        check_text("gpu_uuid", gpu_uuid, required=False)
        check_text("process_name", process_name, required=False)
        self.admit(fingerprint, adapter)

    def admit(self, fingerprint: str, adapter: str) -> None:
        """FailedPrecondition unless `fingerprint` is (now) the pod's weights, or foreign
        ones are allowed; and while it is being re-measured."""
        if self._doubt is not None:
            self._doubt(fingerprint, adapter)
        pod = self._pod_fingerprint()
        if pod and fingerprint != pod and not self._allow_foreign:
            self._stats.foreign_attachments_refused += 1
            log.warning(
                "kv_foreign_attach_refused", fingerprint=fingerprint[:64], pod_fingerprint=pod
            )
            raise FailedPrecondition(
                f"model_fingerprint {fingerprint[:64]!r} is not this pod's model ({pod}); "
                "attach with the fingerprint of the weights this pod runs, or set "
                "INFERCACHE_ALLOW_FOREIGN_MODEL_STORE=true"
            )

    def create(
        self,
        fingerprint: str,
        adapter: str,
        layout: KvLayout,
        process_name: str,
        busy: Set[str],
        tenants: frozenset[str] | None = None,
    ) -> Attachment:
        """A new attachment (not yet registered: see add). When the table is full (the
        caller has reclaimed expired ones already), superseded attachments without leases
        (`busy`: ids holding one) are dropped first; ResourceExhausted if that frees
        nothing."""
        if len(self._by_id) >= self._max:
            self._prune(busy)
        return Attachment(
            secrets.token_hex(16),
            fingerprint,
            adapter,
            layout,
            version_scope(fingerprint, adapter, layout),
            version_tag(fingerprint),
            process_name,
            tenants,
        )

    def _prune(self, busy: Set[str]) -> None:
        for aid, a in list(self._by_id.items()):
            if a.superseded and aid not in busy:
                self.remove(aid)
        if len(self._by_id) >= self._max:
            raise ResourceExhausted(
                f"{self._max} KV attachments are live (INFERCACHE_KV_MAX_ATTACHMENTS); detach "
                "unused ones, or retry: an attachment not renewed for "
                f"{self.ttl_ms} ms (INFERCACHE_KV_ATTACHMENT_TTL_MS) is reclaimed"
            )

    def make_current(self, version: str) -> str | None:
        """Switch the current version to `version`, superseding every attachment of
        another; returns the version that was current."""
        old = self.current
        self.current, self.previous = version, old
        for a in self._by_id.values():
            if a.version != version:
                a.superseded = True
        return old

    def add(self, attachment: Attachment) -> None:
        """Register an attachment made by create; its liveness starts now."""
        self._by_id[attachment.attachment_id] = attachment
        self.touch(attachment)

    def touch(self, attachment: Attachment) -> None:
        """The attachment's process is alive: it lives ttl_ms from now."""
        attachment.expires_at = self._clock() + self.ttl_ms / 1000
        self._expiry.schedule(attachment.attachment_id, attachment.expires_at)

    def expired(self) -> list[Attachment]:
        """Remove and return the attachments not heard from for ttl_ms (their leases are
        the caller's to reclaim)."""
        by_id = self._by_id

        def deadline_of(aid: str) -> float | None:
            a = by_id.get(aid)
            return None if a is None else a.expires_at

        out = [by_id.pop(aid) for aid in self._expiry.due(self._clock(), deadline_of)]
        if out:
            self._stats.expired_attachments += len(out)
            log.info("kv_attachments_expired", count=len(out), ttl_ms=self.ttl_ms)
        return out

    def get(self, attachment_id: str, *, live: bool = True) -> Attachment:
        """The attachment, renewed (any call is a sign of life); FailedPrecondition if
        unknown (never attached, detached or expired) or (with `live`) superseded or no
        longer admitted (see admit)."""
        a = self._by_id.get(attachment_id)
        if a is None:
            raise FailedPrecondition(
                f"unknown KV attachment {attachment_id[:40]!r} (detached, or expired after "
                f"{self.ttl_ms} ms without a call); call AttachHotTier"
            )
        self.touch(a)
        if live and a.superseded:
            raise FailedPrecondition(
                f"KV attachment for model {a.fingerprint[:64]!r} was superseded by a newer "
                "model version; re-attach with the fingerprint of the weights now loaded"
            )
        if live:
            self.admit(a.fingerprint, a.adapter)
        return a

    def request_prefix(self, a: Attachment, tenant: str, cache_salt: str) -> bytes:
        """The scope of `a` narrowed to a tenant and cache salt (see request_scope);
        PermissionDenied for a tenant the attachment was not granted at attach."""
        check_text("tenant", tenant, required=True)
        check_text("cache_salt", cache_salt, required=False)
        if a.tenants is not None and tenant not in a.tenants:
            self._stats.tenants_refused += 1
            log.warning("kv_tenant_refused", attachment=a.attachment_id, tenant=tenant[:64])
            raise PermissionDenied(
                f"tenant {tenant[:64]!r} was not granted to this KV attachment (AttachHotTier "
                f"named {sorted(a.tenants)[:8]}); attach again naming it"
            )
        prefix = request_scope(a.scope, tenant, cache_salt)
        if self._events is not None:
            self._events.scope(prefix, a.scope, a.layout, tenant, cache_salt)
        return prefix

    def find(self, attachment_id: str) -> Attachment | None:
        """The registered attachment or None (no renewal, no checks)."""
        return self._by_id.get(attachment_id)

    def remove(self, attachment_id: str) -> None:
        """Forget an attachment (its leases are the caller's to drop)."""
        del self._by_id[attachment_id]
        self._expiry.discard(attachment_id)
