"""The control-store contract: epochs, rules, audit log, fleet membership, lease holders.

Two implementations: Redis (shared by a fleet) and embedded (one process).
Every method raises TierUnavailable when the backend fails, and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.invalidation.rules import Rule, Selector
from sidecar.keys import KeyDigest


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One invalidation as the audit log keeps it."""

    id: str
    time_ms: int
    caller: str
    selector: Selector
    reason: str
    epoch: int
    estimated_entries: int


@dataclass(frozen=True, slots=True)
class StoreState:
    """What a refresh learns about the store before trusting what it holds."""

    dataset: str
    """Id of the data set: a new one means the store lost everything it held."""
    run: str
    """Id of the store's process: a new one means it restarted (maybe from a snapshot
    that lacks the latest rules)."""
    epoch: int
    """The newest committed epoch (0 before any)."""
    settling_ms: int
    """> 0 for that long after a restart: rules that only members still hold may be
    missing until every member live at the restart has re-published its own."""
    now_ms: int
    """The store's clock."""
    chain: bytes = b""
    """The rule chain's signed head and anchor as stored (verified): while they are
    unchanged, no rule was added or pruned (empty for the embedded store)."""


class ControlStore(Protocol):
    """Shared coordination state for invalidation and single-flight."""

    name: str
    shared: bool
    """True when other processes share this store (then freshness must be confirmed)."""

    async def current_epoch(self) -> int:
        """The newest committed invalidation epoch (0 before any)."""
        ...

    async def commit_invalidation(
        self, selector: Selector, reason: str, caller: str, estimated_entries: int
    ) -> AuditRecord:
        """Atomically: new epoch, rule, audit record, notification. Returns the record."""
        ...

    async def state(self, proposed_dataset: str) -> StoreState:
        """The store's identity and epoch; names the data set `proposed_dataset` if it
        has no id yet (a new or emptied store). StoreDistrusted when the identity, the
        chain's head or anchor fail their MACs or the counter is not the head's epoch."""
        ...

    async def republish(self, rules: Sequence[Rule], epoch: int) -> int:
        """Add the rules the store lacks (a restart lost them) and raise its epoch to at
        least `epoch` and their newest; returns how many were missing. On a shared store
        they are appended to its rule chain, signed again (StoreDistrusted if the chain
        found fails verification: nothing is added to a chain not believed)."""
        ...

    async def wait_durable(self, replicas: int, local_aof: bool, timeout_ms: int) -> None:
        """Return once every write made so far is on `replicas` replicas (and, with
        `local_aof`, fsynced to the AOF of the primary and those replicas); within
        timeout_ms, else TierUnavailable saying how far it got."""
        ...

    async def rules_after(self, epoch: int) -> list[Rule]:
        """Rules with an epoch greater than `epoch`, in the order they were committed.
        On a shared store the whole rule chain is verified first: StoreDistrusted if a
        rule was added, altered, removed or reordered by someone without the secret."""
        ...

    async def prune_rules(self, retention_ms: int) -> tuple[int, int]:
        """Delete rules committed longer ago than the fleet's retention, on the store's clock.

        The retention is the largest of `retention_ms` and every retention a member
        published with its heartbeat, so no member's clock or settings can prune a
        rule another member's entries still need. Returns (cutoff_ms, deleted): rules
        committed before cutoff_ms (store clock) are gone.
        """
        ...

    async def audit_page(self, before: str | None, limit: int) -> tuple[list[AuditRecord], str]:
        """Up to `limit` records older than id `before` (newest first) and the next cursor.
        A record whose tag does not verify is left out (and counted by the store)."""
        ...

    async def heartbeat(
        self, member_id: str, acked_epoch: int, ttl_ms: int, retention_ms: int = 0
    ) -> bool:
        """Mark a sidecar live for ttl_ms (store clock) and current up to acked_epoch;
        True when it was still live when this arrived (False: it had lapsed, or never
        joined, and commits meanwhile did not wait for it).

        (A store that lost its epoch gets it back from `republish`, not from here: the
        counter only moves with the signed head.)
        `retention_ms`: how long the rules must be kept for the entries this member
        may write (its longest TTL plus lease windows); the store keeps the largest seen.
        """
        ...

    async def leave(self, member_id: str) -> None:
        """Remove a sidecar from the fleet (graceful shutdown)."""
        ...

    async def unconfirmed_members(self, epoch: int) -> list[str]:
        """Live sidecars that have not confirmed `epoch` yet."""
        ...

    async def acquire_holder(self, digest: KeyDigest, lease_id: bytes, ttl_ms: int) -> bool:
        """Become the single-flight holder of a key unless someone else is."""
        ...

    async def release_holder(self, digest: KeyDigest, lease_id: bytes) -> None:
        """Give up holding a key if `lease_id` still holds it."""
        ...

    async def renew_holders(
        self, holds: Sequence[tuple[KeyDigest, bytes]], ttl_ms: int
    ) -> list[bool]:
        """Extend each (key, lease id) hold that lease still has to `ttl_ms` from now; True
        where it did (never takes a hold back that lapsed or went to another lease)."""
        ...

    def judge_holds_by(self, kept: Callable[[bytes], bool]) -> None:
        """`kept(lease_id)`: this process still keeps that hold alive (hold_keeper.py).
        A store inside the process judges its own holds by it, not by a TTL that a
        stalled event loop let lapse; a shared store ignores it (its TTL is what other
        pods see)."""
        ...

    async def try_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend a named lock held by `owner` for ttl_ms."""
        ...

    async def shared_secret(self, proposed: bytes) -> bytes:
        """The deployment's lease secret: `proposed` if none exists yet, else the existing one."""
        ...

    def notifications(self) -> AsyncIterator[int]:
        """Epochs of invalidations as they are committed anywhere (best effort)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
