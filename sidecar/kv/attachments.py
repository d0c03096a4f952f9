"""Who is attached to the KV hot tier, and which model version is current.

An attachment is one model process with one fingerprint, adapter and KV layout. The
current version is the fingerprint attached last; attachments of any other are
superseded (they may still release and detach, nothing else). When the pod knows its
own weights' fingerprint, an attachment claiming other weights is refused unless
foreign fingerprints are allowed (INFERCACHE_ALLOW_FOREIGN_MODEL_STORE, the switch
that lets a Store claim another model).
"""

from __future__ import annotations

import secrets
from collections.abc import Set

import structlog

from sidecar.errors import FailedPrecondition, ResourceExhausted
from sidecar.kv.layout import KvLayout, version_scope, version_tag
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
        pod_fingerprint: str = "",
        allow_foreign: bool = False,
    ) -> None:
        """`pod_fingerprint`: the weights this pod runs ("" = unknown: any fingerprint is
        accepted); `allow_foreign`: accept other fingerprints all the same."""
        self._max = max_attachments
        self._stats = stats
        self._pod_fingerprint = pod_fingerprint
        self._allow_foreign = allow_foreign
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
        pod = self._pod_fingerprint
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
    ) -> Attachment:
        """A new attachment (not yet registered: see add). When the table is full,
        superseded attachments without leases (`busy`: ids holding one) are dropped first;
        ResourceExhausted if that frees nothing."""
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
        )

    def _prune(self, busy: Set[str]) -> None:
        for aid, a in list(self._by_id.items()):
            if a.superseded and aid not in busy:
                del self._by_id[aid]
        if len(self._by_id) >= self._max:
            raise ResourceExhausted(f"{self._max} KV attachments are live; detach unused ones")

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
        """Register an attachment made by create."""
        self._by_id[attachment.attachment_id] = attachment

    def get(self, attachment_id: str, *, live: bool = True) -> Attachment:
        """The attachment; FailedPrecondition if unknown or (with `live`) superseded."""
        a = self._by_id.get(attachment_id)
        if a is None:
            raise FailedPrecondition(
                f"unknown KV attachment {attachment_id[:40]!r}; call AttachHotTier"
            )
        if live and a.superseded:
            raise FailedPrecondition(
                f"KV attachment for model {a.fingerprint[:64]!r} was superseded by a newer "
                "model version; re-attach with the fingerprint of the weights now loaded"
            )
        return a

    def remove(self, attachment_id: str) -> None:
        """Forget an attachment (its leases are the caller's to drop)."""
        del self._by_id[attachment_id]
