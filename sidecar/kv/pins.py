"""Leases: named sets of pins on KV slots that lapse unless renewed.

A model process holds a lease while it reads or writes slots; a process that
dies or forgets to Release loses its pins when the lease expires, so slots are
never pinned forever. Expiry is found with a bounded heap (kv/expiry.py: a renewal
pushes nothing), so sweeping costs O(log n) per lease, and the owner sweeps before
every operation. Leases are also indexed by attachment, so reclaiming a dead
attachment's leases costs what it holds, not the whole table.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.errors import FailedPrecondition, ResourceExhausted
from sidecar.kv.expiry import ExpiryQueue


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
        self._by_attachment: dict[str, set[str]] = {}
        self._expiry = ExpiryQueue()

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
        self._by_attachment.setdefault(attachment_id, set()).add(record.lease_id)
        self.renew(record, ttl_ms)
        return record

    def get(self, lease_id: str, attachment_id: str) -> LeaseRecord:
        """The live lease of this attachment, or FailedPrecondition."""
        record = self._leases.get(lease_id)
        if record is None or record.attachment_id != attachment_id:
            raise FailedPrecondition(f"lease {lease_id[:40]!r} is unknown, released or expired")
        return record

    def holds(self, record: LeaseRecord) -> bool:
        """Whether `record` is still live (not released, expired or reclaimed)."""
        return self._leases.get(record.lease_id) is record

    def renew(self, record: LeaseRecord, ttl_ms: int) -> None:
        """Expire ttl_ms from now."""
        record.ttl_ms = ttl_ms
        record.expires_at = self._clock() + ttl_ms / 1000
        self._expiry.schedule(record.lease_id, record.expires_at)

    @property
    def expiry_entries(self) -> int:
        """Entries of the expiry heap (bounded by about twice the live leases)."""
        return len(self._expiry)

    def remove(self, lease_id: str) -> LeaseRecord | None:
        """Forget a lease (its pins are the caller's to drop)."""
        record = self._leases.pop(lease_id, None)
        if record is not None:
            self._forget(record)
        return record

    def _forget(self, record: LeaseRecord) -> None:
        self._expiry.discard(record.lease_id)
        ids = self._by_attachment.get(record.attachment_id)
        if ids is not None:
            ids.discard(record.lease_id)
            if not ids:
                del self._by_attachment[record.attachment_id]

    def expired(self) -> list[LeaseRecord]:
        """Remove and return every lease whose expiry has passed."""
        leases = self._leases

        def deadline_of(lease_id: str) -> float | None:
            record = leases.get(lease_id)
            return None if record is None else record.expires_at

        out: list[LeaseRecord] = []
        for lease_id in self._expiry.due(self._clock(), deadline_of):
            record = leases.pop(lease_id)
            self._forget(record)
            out.append(record)
        return out

    def of_attachment(self, attachment_id: str) -> list[LeaseRecord]:
        """Leases an attachment holds."""
        return [self._leases[i] for i in self._by_attachment.get(attachment_id, ())]

    def holders(self) -> set[str]:
        """Attachments that hold at least one lease."""
        return set(self._by_attachment)

    def wall_ms(self, deadline: float) -> int:
        """A deadline of this table's clock (a lease's expires_at) as Unix milliseconds."""
        return int((time.time() + (deadline - self._clock())) * 1000)
