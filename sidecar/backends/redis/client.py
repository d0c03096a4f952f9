"""Redis plumbing shared by the warm tier and the control store: key names and the guard.

Failure policy: every call has a deadline. A failure opens a small circuit for
a growing pause (capped at one second) during which calls fail at once instead
of each paying the deadline; the first call after the pause probes Redis again,
so the sidecar heals without a restart. A patient guard (the control plane's) counts
its deadline as Redis's time, not the sidecar's own CPU, waits or stops
(deadline.py): a busy host is not a Redis outage.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from types import TracebackType

from redis.exceptions import RedisClusterException, RedisError

from sidecar.backends.redis.deadline import PatientDeadline
from sidecar.config import DEFAULTS
from sidecar.errors import StoreDistrusted, TierTimeout, TierUnavailable
from sidecar.keys import KeyDigest

_MIN_PAUSE_S = 0.05
_MAX_PAUSE_S = 1.0


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Every Redis key name the sidecar uses, derived from one prefix.

    Coordination keys share the `{meta}` hash tag so that scripts touching
    several of them stay in one slot under Redis Cluster.
    """

    prefix: str = DEFAULTS.redis.key_prefix

    def entry(self, digest: KeyDigest) -> bytes:
        """Where a result entry lives."""
        return f"{self.prefix}r:{digest.hex()}".encode()

    @property
    def entry_pattern(self) -> str:
        """SCAN pattern of entry keys."""
        return f"{self.prefix}r:*"

    def digest_of(self, key: bytes) -> KeyDigest | None:
        """Inverse of entry(); None for a key under the entry prefix that entry() cannot
        have written (someone else's key in our namespace: skipped, never fatal)."""
        suffix = key[len(self.prefix) + 2 :]
        if len(suffix) != 64 or not key.startswith(self.prefix.encode() + b"r:"):
            return None
        try:
            return KeyDigest(bytes.fromhex(suffix.decode("ascii")))
        except ValueError:  # not hex (or not ASCII, a UnicodeDecodeError)
            return None

    def holder(self, digest: KeyDigest) -> str:
        """Single-flight holder of a key."""
        return f"{self.prefix}l:{digest.hex()}"

    def meta(self, name: str) -> str:
        """A coordination key (epoch, rules, audit, members, acks, secret, locks)."""
        return f"{self.prefix}{{meta}}:{name}"

    def channel(self, cluster: bool) -> str:
        """Channel announcing new invalidation epochs: on a cluster a shard channel in the
        `{meta}` slot, so that the commit script may SPUBLISH it (one slot per script)."""
        return f"{self.prefix}{{meta}}:invalidations" if cluster else f"{self.prefix}invalidations"


class RedisGuard:
    """Maps Redis errors and deadline overruns to TierUnavailable, and runs the circuit."""

    def __init__(self, what: str, *, patient: bool = False) -> None:
        """`patient`: deadlines count Redis's time only (deadline.py), for calls off the
        lookup path, where the wall-clock bound is not a request's latency budget."""
        self._what = what
        self.patient = patient
        self._pause_until = 0.0
        self._pause_s = _MIN_PAUSE_S
        self.failures = 0

    def check(self) -> None:
        """Raise TierUnavailable while the circuit is open (no call would be tried)."""
        if time.monotonic() < self._pause_until:
            raise TierUnavailable(f"{self._what}: recently failed; pausing before the next try")

    def __call__(self, deadline_s: float) -> _Guarded:
        """`async with guard(deadline_s):` runs the body under a deadline, failing fast
        while the circuit is open (a class, not a generator-based context manager: this
        wraps every Redis call on the hot path)."""
        return _Guarded(self, deadline_s)

    def _passed(self) -> None:
        self._pause_s = _MIN_PAUSE_S

    def _trip(self) -> None:
        self.failures += 1
        self._pause_until = time.monotonic() + self._pause_s
        self._pause_s = min(self._pause_s * 2, _MAX_PAUSE_S)


class _Guarded:
    """One guarded call (see RedisGuard.__call__)."""

    __slots__ = ("_deadline_s", "_guard", "_timeout")

    def __init__(self, guard: RedisGuard, deadline_s: float) -> None:
        self._guard = guard
        self._deadline_s = deadline_s
        self._timeout: asyncio.Timeout | PatientDeadline | None = None

    async def __aenter__(self) -> None:
        self._guard.check()
        if self._guard.patient:
            self._timeout = PatientDeadline(self._deadline_s)
        else:
            self._timeout = asyncio.timeout(self._deadline_s)
        await self._timeout.__aenter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._timeout is not None
        guard = self._guard
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError as timed_out:
            exc = timed_out
        if isinstance(exc, TimeoutError):  # the deadline's, or one the body raised
            guard._trip()
            if isinstance(self._timeout, PatientDeadline):
                raise TierTimeout(f"{guard._what}: {self._timeout.describe()}") from exc
            raise TierTimeout(
                f"{guard._what}: no answer within {self._deadline_s * 1000:.0f} ms"
            ) from exc
        # RedisClusterException (no slot owner known, e.g. mid-failover) is not a RedisError.
        if isinstance(exc, RedisError | RedisClusterException | OSError):
            guard._trip()
            raise TierUnavailable(f"{guard._what}: {type(exc).__name__}: {exc}") from exc
        if exc is None:
            guard._passed()


MAX_EPOCH = 2**53
"""The largest epoch counter believed (an INCR-ed counter never gets near it)."""


def parse_epoch(raw: object) -> int:
    """The epoch counter as Redis returned it (None: 0). StoreDistrusted for a value no
    sidecar writes: not a decimal integer, negative, or above MAX_EPOCH."""
    if raw is None:
        return 0
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
    if not text.isdigit() or len(text) > 16 or int(text) > MAX_EPOCH:
        shown = text[:24] + ("..." if len(text) > 24 else "")
        raise StoreDistrusted(
            f"the store's epoch counter is {shown!r}, not an integer in [0, 2^53]: "
            "someone else wrote it; serving no hits (docs/security.md)"
        )
    return int(text)
