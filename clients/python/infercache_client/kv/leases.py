"""Background renewal of slot leases, so pinned blocks outlive a long prefill."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

log = logging.getLogger(__name__)

# Renew once a third of the ttl has passed: two more attempts fit before expiry if the
# sidecar is briefly slow.
RENEW_FRACTION = 1 / 3
# After a failed attempt that may succeed later (UNAVAILABLE, deadline), try again this soon.
RETRY_S = 0.05
# The sidecar says the lease is gone or no longer ours: renewing again cannot help.
_FINAL = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


@dataclass(slots=True)
class _Tracked:
    ttl_s: float
    due: float
    """time.monotonic() of the next renewal."""
    expires: float
    """time.monotonic() by which the last granted ttl runs out."""


RenewFn = Callable[[str], int]
"""Renews one lease by id; returns the granted time to live in milliseconds."""


class LeaseRenewer:
    """A daemon thread that renews tracked leases after a third of their ttl has passed.

    A lease the sidecar no longer knows (expired, released elsewhere, attachment
    superseded) is dropped and listed in lost(); the slots it pinned must be treated
    as gone. Transient errors are retried until the lease's own expiry.
    """

    def __init__(self, renew: RenewFn) -> None:
        """`renew(lease_id) -> ttl_ms` performs one RenewLease call."""
        self._renew = renew
        self._leases: dict[str, _Tracked] = {}
        self._lost: set[str] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="infercache-lease-renewer")
        self._thread.daemon = True
        self._thread.start()

    def track(self, lease_id: str, ttl_ms: int) -> None:
        """Keep `lease_id` alive from now on (again, if it was tracked already)."""
        if not lease_id or ttl_ms <= 0:
            return
        now = time.monotonic()
        ttl_s = ttl_ms / 1000
        with self._cond:
            self._lost.discard(lease_id)
            self._leases[lease_id] = _Tracked(ttl_s, now + ttl_s * RENEW_FRACTION, now + ttl_s)
            self._cond.notify()

    def forget(self, lease_id: str) -> None:
        """Stop renewing `lease_id` (it was released)."""
        with self._cond:
            self._leases.pop(lease_id, None)
            self._lost.discard(lease_id)

    def tracked(self) -> frozenset[str]:
        """Lease ids being renewed."""
        with self._cond:
            return frozenset(self._leases)

    def lost(self) -> frozenset[str]:
        """Lease ids that could not be renewed before they expired or that the sidecar refused."""
        with self._cond:
            return frozenset(self._lost)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (the leases then expire on the sidecar unless released)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _next_due(self) -> tuple[str, float] | None:
        if not self._leases:
            return None
        lease_id = min(self._leases, key=lambda k: self._leases[k].due)
        return lease_id, self._leases[lease_id].due

    def _run(self) -> None:
        while True:
            with self._cond:
                lease_id = self._wait_for_due()
                if lease_id is None:
                    return
            # The RPC runs outside the lock so track/forget never wait on the network.
            self._renew_one(lease_id)

    def _wait_for_due(self) -> str | None:
        """Block (lock held) until a lease is due; None once closed."""
        while not self._closed:
            nxt = self._next_due()
            if nxt is None:
                self._cond.wait()
                continue
            wait = nxt[1] - time.monotonic()
            if wait <= 0:
                return nxt[0]
            self._cond.wait(wait)
        return None

    def _renew_one(self, lease_id: str) -> None:
        try:
            ttl_ms = self._renew(lease_id)
        except Exception as exc:  # a closed channel raises ValueError, not RpcError
            code = exc.code() if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") else None
            with self._cond:
                entry = self._leases.get(lease_id)
                if entry is None:
                    return
                now = time.monotonic()
                if code in _FINAL or now + RETRY_S >= entry.expires:
                    del self._leases[lease_id]
                    self._lost.add(lease_id)
                    log.warning("lease %s lost: %s", lease_id, code)
                else:
                    entry.due = now + RETRY_S
            return
        now = time.monotonic()
        with self._cond:
            entry = self._leases.get(lease_id)
            if entry is not None:  # not released while the RPC was in flight
                entry.ttl_s = ttl_ms / 1000
                entry.due = now + entry.ttl_s * RENEW_FRACTION
                entry.expires = now + entry.ttl_s
