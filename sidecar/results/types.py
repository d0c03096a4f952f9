"""The result cache's values: what a lookup asks and finds, what a store did, and the
observer contract that sees every lookup call.

These are the hot path's types: enums hashed by identity and NamedTuples (see
LookupQuery) rather than frozen dataclasses where one is built per looked-up key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Protocol

from sidecar.entries import Entry
from sidecar.keys import CacheKey, KeyDigest, KeyRequest
from sidecar.policy.cacheability import NO_TRAITS, Bypass, RequestTraits


class Outcome(Enum):
    """What a lookup found."""

    HIT = "hit"
    MISS = "miss"
    BYPASS = "bypass"

    # Members are singletons compared by identity; hashing by identity keeps the
    # per-key dict lookups keyed by them in C (Enum.__hash__ is Python code).
    __hash__ = object.__hash__


class TierName(Enum):
    """Where a hit came from."""

    HOT = "hot"
    WARM = "warm"

    __hash__ = object.__hash__  # see Outcome


class StoreStatus(Enum):
    """What a store did."""

    STORED = "stored"
    WRITE_FAILED = "write_failed"
    BYPASSED = "bypassed"
    STALE_LEASE = "stale_lease"


class LookupQuery(NamedTuple):
    """One lookup: the key, the caller's freshness bound (0 = none), single-flight wait, the
    request it came from and what the caller declares (for the cacheability policy).

    Immutable; a NamedTuple rather than a frozen dataclass because one is built per
    looked-up key and a frozen dataclass's __init__ costs ~3x more.
    """

    key: CacheKey
    max_age_s: int = 0
    wait_ms: int = 0
    source: KeyRequest | None = None
    """The request the key was built from; set by the data plane so that hits can be
    recorded for prewarm (None: this lookup is not traffic, e.g. prewarm's own)."""
    traits: RequestTraits = NO_TRAITS
    """Declared traits; NO_TRAITS (compared by identity) when none."""
    accept: Callable[[Entry], bool] | None = None
    """Whether the caller can answer from an entry found (None: from any). One it cannot
    is a MISS like one older than max_age_s: counted as a miss, recomputed under the
    key's single-flight hold, and its waiters wait for the entry that replaces it."""


class LookupResult(NamedTuple):
    """The answer to one lookup (immutable; a NamedTuple for the same reason as LookupQuery)."""

    outcome: Outcome
    digest: KeyDigest
    entry: Entry | None = None
    tier: TierName | None = None
    age_ms: int = 0
    degraded: bool = False
    bypass: Bypass | None = None
    lease: bytes = b""
    lease_holder: bool = False


@dataclass(frozen=True, slots=True)
class StoreResult:
    """The answer to one store."""

    status: StoreStatus
    digest: KeyDigest
    ttl_s: int
    bypass: Bypass | None = None


class LookupObserver(Protocol):
    """Sees every finished lookup call: the queries and their results, in the same order.

    Called once per `ResultCache.lookup_many` (not per key), on the event loop, after
    every result is final (leases attached). It must not block or raise, and must not
    keep the sequences beyond the call: it runs on the hit path.
    """

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Account for one lookup call."""
        ...
