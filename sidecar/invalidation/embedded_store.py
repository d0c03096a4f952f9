"""The embedded control store: one process is the whole fleet.

The audit log lives in this process's memory (bounded) and is lost on restart,
like the embedded warm tier's entries it governs.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence

from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, StoreState
from sidecar.keys import KeyDigest

_AUDIT_MAX = 100_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _never(lease_id: bytes) -> bool:
    return False


class EmbeddedControlStore:
    """ControlStore in process memory."""

    name = "embedded"
    shared = False

    def __init__(self, clock_ms: Callable[[], int] = _wall_ms) -> None:
        self._clock_ms = clock_ms
        self._epoch = 0
        self._retention_ms = 0
        self._rules: list[Rule] = []
        self._audit: deque[AuditRecord] = deque(maxlen=_AUDIT_MAX)
        self._holders: dict[KeyDigest, tuple[bytes, int]] = {}
        self._kept: Callable[[bytes], bool] = _never
        self._locks: dict[str, tuple[str, int]] = {}
        self._secret: bytes | None = None
        self._subscribers: set[asyncio.Queue[int]] = set()

    async def current_epoch(self) -> int:
        """The newest epoch."""
        return self._epoch

    def epoch_now(self) -> int:
        """Synchronous current epoch (the embedded warm tier reads it with every batch)."""
        return self._epoch

    async def commit_invalidation(
        self, selector: Selector, reason: str, caller: str, estimated_entries: int
    ) -> AuditRecord:
        """Bump the epoch and record the rule and its audit entry."""
        self._epoch += 1
        now = self._clock_ms()
        self._rules.append(Rule(self._epoch, selector, now))
        record = AuditRecord(
            id=f"{now}-{self._epoch}",
            time_ms=now,
            caller=caller,
            selector=selector,
            reason=reason,
            epoch=self._epoch,
            estimated_entries=estimated_entries,
        )
        self._audit.append(record)
        for q in self._subscribers:
            q.put_nowait(self._epoch)
        return record

    async def state(self, proposed_dataset: str) -> StoreState:
        """Never changes identity: the data lives and dies with this process."""
        return StoreState("embedded", "embedded", self._epoch, 0, self._clock_ms())

    async def republish(self, rules: Sequence[Rule], epoch: int) -> int:
        """Nothing is ever missing: the process that holds the rules is the store."""
        return 0

    async def wait_durable(self, replicas: int, local_aof: bool, timeout_ms: int) -> None:
        """Nothing outlives this process: there is nothing to wait for."""

    async def rules_after(self, epoch: int) -> list[Rule]:
        """Rules newer than epoch."""
        return [r for r in self._rules if r.epoch > epoch]

    async def prune_rules(self, retention_ms: int) -> tuple[int, int]:
        """Drop rules older than the retention (this process's clock is the store's)."""
        cutoff = self._clock_ms() - max(retention_ms, self._retention_ms)
        before = len(self._rules)
        self._rules = [r for r in self._rules if r.time_ms >= cutoff]
        return cutoff, before - len(self._rules)

    async def audit_page(self, before: str | None, limit: int) -> tuple[list[AuditRecord], str]:
        """Newest first, strictly older than `before`."""
        records = list(reversed(self._audit))
        if before:
            epoch = int(before.rsplit("-", 1)[-1])
            records = [r for r in records if r.epoch < epoch]
        page = records[:limit]
        more = len(records) > limit
        return page, (page[-1].id if more and page else "")

    async def heartbeat(
        self, member_id: str, acked_epoch: int, ttl_ms: int, retention_ms: int = 0
    ) -> bool:
        """Only the retention matters: there are no other members (always continuous)."""
        self._retention_ms = max(self._retention_ms, retention_ms)
        return True

    async def leave(self, member_id: str) -> None:
        """Nothing to do."""

    async def unconfirmed_members(self, epoch: int) -> list[str]:
        """The only member applies rules synchronously."""
        return []

    async def acquire_holder(self, digest: KeyDigest, lease_id: bytes, ttl_ms: int) -> bool:
        """Hold the key unless a live holder exists."""
        return self.hold_now(digest, lease_id, ttl_ms)

    def hold_now(self, digest: KeyDigest, lease_id: bytes, ttl_ms: int) -> bool:
        """acquire_holder without a suspension point (see backends/embedded_holding.py)."""
        now = self._clock_ms()
        current = self._holders.get(digest)
        if current is not None and (current[1] > now or self._kept(current[0])):
            return False
        self._holders[digest] = (lease_id, now + ttl_ms)
        if len(self._holders) > 100_000:
            self._holders = {d: h for d, h in self._holders.items() if h[1] > now}
        return True

    async def release_holder(self, digest: KeyDigest, lease_id: bytes) -> None:
        """Release if still ours."""
        self.release_now(digest, lease_id)

    def release_now(self, digest: KeyDigest, lease_id: bytes) -> None:
        """release_holder without a suspension point."""
        current = self._holders.get(digest)
        if current is not None and current[0] == lease_id:
            del self._holders[digest]

    async def renew_holders(
        self, holds: Sequence[tuple[KeyDigest, bytes]], ttl_ms: int
    ) -> list[bool]:
        """Extend the live holds their leases still have."""
        now = self._clock_ms()
        renewed: list[bool] = []
        for digest, lease_id in holds:
            current = self._holders.get(digest)
            # Past its TTL but still ours: nobody took it (a hold this process keeps is
            # never taken here), the renewal only ran late (a stalled event loop).
            ours = current is not None and current[0] == lease_id
            if ours:
                self._holders[digest] = (lease_id, now + ttl_ms)
            renewed.append(ours)
        return renewed

    def judge_holds_by(self, kept: Callable[[bytes], bool]) -> None:
        """Holds `kept` says are kept are live whatever their TTL (one process: the
        keeper's renewal and a waiter's take-over run on one loop, and after a stall
        longer than the TTL the waiter's timer may come first)."""
        self._kept = kept

    async def try_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend a lock."""
        now = self._clock_ms()
        current = self._locks.get(name)
        if current is not None and current[0] != owner and current[1] > now:
            return False
        self._locks[name] = (owner, now + ttl_ms)
        return True

    async def shared_secret(self, proposed: bytes) -> bytes:
        """First proposal wins."""
        if self._secret is None:
            self._secret = proposed
        return self._secret

    async def notifications(self) -> AsyncIterator[int]:
        """Epochs committed in this process."""
        q: asyncio.Queue[int] = asyncio.Queue()
        self._subscribers.add(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._subscribers.discard(q)

    async def close(self) -> None:
        """Nothing to release."""
