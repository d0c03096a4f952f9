"""Invalidate: commit a rule, then wait until every live sidecar has confirmed it."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from dataclasses import dataclass

import structlog

from sidecar import entries
from sidecar.errors import InvalidArgument, StoreDistrusted, TierUnavailable, Unavailable
from sidecar.identity.cell import IdentityCell, as_cell
from sidecar.identity.pod import PodIdentity
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, ControlStore
from sidecar.keys import dims_from_material
from sidecar.observability.stats import CacheStats
from sidecar.tiers.base import WarmTier

log = structlog.get_logger("infercache.invalidation")

MAX_REASON_CHARS = 1024
_SAMPLE = 128
_SAMPLE_PAGES = 8


@dataclass(frozen=True, slots=True)
class Durability:
    """What Invalidate waits for before OK, beyond the primary holding the rule."""

    replicas: int = 0
    """Replicas that must hold the rule (WAIT)."""
    local_aof: bool = False
    """The rule must be fsynced to the AOF of the primary and those replicas (WAITAOF)."""
    timeout_ms: int = 1000

    @property
    def required(self) -> bool:
        """False for the default: the primary's memory is enough."""
        return self.replicas > 0 or self.local_aof


class Invalidator:
    """Admin-side invalidation: O(1) in the number of entries (one script + a barrier)."""

    def __init__(
        self,
        control: ControlStore,
        freshness: Freshness,
        warm: WarmTier,
        stats: CacheStats | None = None,
        pod: PodIdentity | IdentityCell | None = None,
        durability: Durability = Durability(),
    ) -> None:
        self.control = control
        # Selectors name adapters as keys do; the pod (its identity now) resolves both
        # the same way.
        self.identity = as_cell(pod)
        self.durability = durability
        self.freshness = freshness
        self.warm = warm
        self.stats = stats or CacheStats()
        # Every live member refreshes at least every bound/3 and is dropped by the
        # store after `bound`; past this deadline something is wrong, say so.
        self.barrier_timeout_s = 2 * freshness.bound_s + 1.0

    async def invalidate(self, selector: Selector, reason: str, caller: str) -> AuditRecord:
        """Commit and confirm fleet-wide; Unavailable if either cannot be done.

        An adapter name is resolved to its fingerprint first (as keys are); an adapter
        the pod does not know is FailedPrecondition, and nothing is committed.
        """
        selector.validate()
        if selector.adapter_version is not None:
            adapter = self.identity.pod.resolve_selector_adapter(selector.adapter_version)
            selector = dataclasses.replace(selector, adapter_version=adapter)
        if not reason.strip():
            raise InvalidArgument("reason", "is required (it is kept in the audit log)")
        if len(reason) > MAX_REASON_CHARS:
            raise InvalidArgument(
                "reason", f"is {len(reason)} characters; the limit is {MAX_REASON_CHARS}"
            )
        # The estimate's reads run beside the refresh: a Redis that does not answer fails
        # the Invalidate after one deadline, not after the estimate's and the refresh's.
        estimating = asyncio.create_task(self._estimate(selector))
        try:
            # The heartbeat in refresh() restores the store's epoch if the store lost
            # it, so the new rule is numbered above every entry this sidecar stamped.
            await self.freshness.refresh()
            estimate = await estimating
            record = await self.control.commit_invalidation(selector, reason, caller, estimate)
        except StoreDistrusted as exc:
            raise Unavailable(f"store distrusted, nothing was invalidated: {exc}") from exc
        except TierUnavailable as exc:
            raise Unavailable(f"store unreachable, nothing was invalidated: {exc}") from exc
        finally:
            if not estimating.done():
                estimating.cancel()
                await asyncio.wait([estimating])
        self.freshness.rules.add(Rule(record.epoch, selector, record.time_ms))
        self.stats.count_invalidation(selector.model_version or "")
        log.info(
            "invalidated",
            epoch=record.epoch,
            caller=caller,
            selector=selector.describe(),
            estimated_entries=estimate,
        )
        try:
            if self.durability.required:
                d = self.durability
                await self.control.wait_durable(d.replicas, d.local_aof, d.timeout_ms)
        except TierUnavailable as exc:
            raise Unavailable(
                f"invalidation committed at epoch {record.epoch} but not known to be durable: {exc}"
            ) from exc
        try:
            await self.freshness.refresh()
            await self._barrier(record.epoch)
        except TierUnavailable as exc:
            raise Unavailable(
                f"invalidation committed at epoch {record.epoch} but its fleet-wide "
                f"confirmation failed: {exc}"
            ) from exc
        return record

    async def _barrier(self, epoch: int) -> None:
        deadline = time.monotonic() + self.barrier_timeout_s
        pause = 0.002
        while True:
            pending = await self.control.unconfirmed_members(epoch)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"invalidation committed at epoch {epoch} but {len(pending)} sidecar(s) "
                    f"did not confirm within {self.barrier_timeout_s:.1f} s: {', '.join(pending)}"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    async def _estimate(self, selector: Selector) -> int:
        """Matching fraction of a small sample times the entry count (best effort).

        SCAN may return empty pages before its end (notably where reclaim just
        emptied the keyspace), so a few pages are read until the sample is full.
        """
        sample: list[bytes] = []
        try:
            cursor = 0
            for _ in range(_SAMPLE_PAGES):
                cursor, page = await self.warm.scan_page(cursor, _SAMPLE)
                sample.extend(head for _, head in page)
                if cursor == 0 or len(sample) >= _SAMPLE:
                    break
            if not sample:
                return 0
            total = await self.warm.approx_entries()
        except TierUnavailable as exc:
            log.warning("estimate_failed", error=str(exc))
            return 0
        matched = 0
        for head in sample:
            peeked = entries.peek(head)
            dims = dims_from_material(peeked[1]) if peeked else None
            if dims is not None and selector.matches(dims):
                matched += 1
        return round(total * matched / len(sample))

    async def list(self, page_token: str, page_size: int) -> tuple[list[AuditRecord], str]:
        """A page of the audit log, newest first."""
        if page_token and not re.fullmatch(r"\d+-\d+", page_token):
            raise InvalidArgument("page_token", "is not a token from ListInvalidations")
        size = 50 if page_size == 0 else page_size
        if not 1 <= size <= 1000:
            raise InvalidArgument("page_size", f"is {page_size}; must be in [0, 1000]")
        try:
            return await self.control.audit_page(page_token or None, size)
        except TierUnavailable as exc:
            raise Unavailable(f"store unreachable: {exc}") from exc
