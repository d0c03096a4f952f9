"""Leases: named sets of pins on KV slots that lapse unless renewed.

A model process holds a lease while it reads or writes slots; a process that
dies or forgets to Release loses its pins when the lease expires, so slots are
never pinned forever. Expiry is found with a heap (renewal pushes a new entry;
stale entries are skipped when they surface), so sweeping costs O(log n) per
lease, and the owner sweeps before every operation.
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.errors import FailedPrecondition, ResourceExhausted


@dataclass(slots=True)
class LeaseRecord:
    """One lease: its pins (one entry per pin) and its allocated, unpublished slots."""

    lease_id: str
    attachment_id: str
    ttl_ms: int
    expires_at: float
    """Monotonic seconds."""
    pins: list[int] = field(default_factory=list)
    allocated: set[int] = field(default_factory=set)


class LeaseTable:
    """Live leases by id, with expiry."""

    def __init__(self, max_leases: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_leases
        self._clock = clock
        self._leases: dict[str, LeaseRecord] = {}
        self._expiry: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._leases)

    def create(self, attachment_id: str, ttl_ms: int) -> LeaseRecord:
        """A new empty lease expiring ttl_ms from now."""
        if len(self._leases) >= self._max:
            raise ResourceExhausted(
                f"{self._max} KV leases are live; release some or let them expire"
            )
        record = LeaseRecord(secrets.token_hex(16), attachment_id, ttl_ms, 0.0)
        self._leases[record.lease_id] = record
        self.renew(record, ttl_ms)
        return record

    def get(self, lease_id: str, attachment_id: str) -> LeaseRecord:
        """The live lease of this attachment, or FailedPrecondition."""
        record = self._leases.get(lease_id)
        if record is None or record.attachment_id != attachment_id:
            raise FailedPrecondition(f"lease {lease_id[:40]!r} is unknown, released or expired")
        return record

    def renew(self, record: LeaseRecord, ttl_ms: int) -> None:
        """Expire ttl_ms from now."""
        record.ttl_ms = ttl_ms
        record.expires_at = self._clock() + ttl_ms / 1000
        heapq.heappush(self._expiry, (record.expires_at, next(self._seq), record.lease_id))

    def remove(self, lease_id: str) -> LeaseRecord | None:
        """Forget a lease (its pins are the caller's to drop)."""
        return self._leases.pop(lease_id, None)

    def expired(self) -> list[LeaseRecord]:
        """Remove and return every lease whose expiry has passed."""
        now = self._clock()
        out: list[LeaseRecord] = []
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, _, lease_id = heapq.heappop(heap)
            record = self._leases.get(lease_id)
            # A renewed lease has a later entry in the heap; this one is stale.
            if record is not None and record.expires_at <= now:
                del self._leases[lease_id]
                out.append(record)
        return out

    def of_attachment(self, attachment_id: str) -> list[LeaseRecord]:
        """Leases an attachment holds (O(leases); only used on detach)."""
        return [r for r in self._leases.values() if r.attachment_id == attachment_id]

    def holders(self) -> set[str]:
        """Attachments that hold at least one lease."""
        return {r.attachment_id for r in self._leases.values()}

    def unix_ms(self, record: LeaseRecord) -> int:
        """The lease's expiry as Unix milliseconds."""
        return int((time.time() + (record.expires_at - self._clock())) * 1000)
