"""One role's attachment to the sidecar, kept alive across sidecar failures.

Both halves of the connector (scheduler and worker) hold a SidecarLink. It attaches
lazily, and any failed RPC drops the attachment and the channel and backs off for
`retry_s`: meanwhile tier() answers None and the connector behaves as if the cache
were empty, so vLLM keeps serving at full speed with 0 external tokens. After the
back-off the next call attaches again on a fresh channel (a restarted sidecar has
forgotten the old attachment and pool; gRPC's own reconnect back-off can grow to
minutes, a new channel does not wait for it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from infercache.v1 import kv_pb2 as PB2

from infercache_client.kv.client import HotTier, KvCacheClient

log = logging.getLogger("infercache_client.vllm")

T = TypeVar("T")


class SidecarLink:
    """Lazily attached HotTier with failure back-off. Thread-safe."""

    def __init__(
        self,
        target: str,
        *,
        model_fingerprint: str,
        layout: PB2.KvLayout,
        process_name: str,
        timeout_s: float,
        attach_timeout_s: float,
        retry_s: float,
        tenant: str = "",
        domain_key_file: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`timeout_s` bounds every RPC but the attach (`attach_timeout_s`). The
        attachment is bound to `tenant` (the only tenant it may name) and, when the
        sidecar has trust domains, proves its domain with `domain_key_file`."""
        self._tenants = (tenant,) if tenant else ()
        self._domain_key_file = domain_key_file or None
        self._target = target
        self._fingerprint = model_fingerprint
        self._layout = layout
        self._process_name = process_name
        self._timeout_s = timeout_s
        self._attach_timeout_s = attach_timeout_s
        self._retry_s = retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._client: KvCacheClient | None = None
        self._tier: HotTier | None = None
        self._quiet_until = 0.0
        self.failures = 0
        """RPCs that failed (each started a back-off)."""
        self.attaches = 0
        """Successful attaches (more than one: the sidecar was lost and found again)."""

    def tier(self) -> HotTier | None:
        """The attachment, attaching first if needed; None while backing off."""
        with self._lock:
            if self._tier is not None:
                return self._tier
            if self._clock() < self._quiet_until:
                return None
            client = KvCacheClient(self._target, timeout_s=self._timeout_s)
            try:
                tier = client.attach(
                    model_fingerprint=self._fingerprint,
                    layout=self._layout,
                    process_name=self._process_name,
                    timeout_s=self._attach_timeout_s,
                    tenants=self._tenants,
                    domain_key_file=self._domain_key_file,
                )
            except Exception as exc:  # RpcError, or a pool this process cannot map
                client.close()
                self._back_off_locked("attach", exc)
                return None
            self._client, self._tier = client, tier
            self.attaches += 1
            log.info(
                "infercache: attached to %s (scope %s, pool %s, %d slots)",
                self._target,
                tier.scope_id[:16],
                tier.pool_id,
                tier.pool.num_slots,
            )
            return tier

    def call(self, what: str, fn: Callable[[HotTier], T]) -> T | None:
        """fn(tier), or None when there is no attachment or the call fails (then back off)."""
        tier = self.tier()
        if tier is None:
            return None
        try:
            return fn(tier)
        except Exception as exc:
            self.fail(what, exc, tier)
            return None

    def release(self, tier: HotTier, lease_id: str) -> None:
        """Release a lease taken through `tier`. Never backs off: a lease of an attachment
        that is gone (sidecar restarted) is gone with it, and an unreleased one expires
        (its renewal stops with the attachment)."""
        with self._lock:
            current = tier is self._tier
        if not current:
            return
        try:
            tier.release(lease_id)
        except Exception as exc:
            if tier.renewer is not None:
                tier.renewer.forget(lease_id)
            log.debug("infercache: release of %s failed: %s", lease_id, exc)

    def reset(self, tier: HotTier) -> None:
        """Drop `tier` without backing off: the next tier() attaches again at once (the
        scheduler half saw a newer pool, i.e. the sidecar restarted)."""
        with self._lock:
            if tier is self._tier:
                self._drop_locked()

    def fail(self, what: str, exc: BaseException, tier: HotTier | None = None) -> None:
        """Drop the attachment `tier` (if still current) and back off."""
        with self._lock:
            if tier is not None and tier is not self._tier:
                return  # another thread dropped it already
            self._drop_locked()
            self._back_off_locked(what, exc)

    def close(self) -> None:
        """Detach (best effort) and close the channel."""
        with self._lock:
            tier = self._tier
            if tier is not None:
                try:
                    tier.detach()
                except Exception as exc:  # the sidecar may be gone: its leases expire
                    log.debug("infercache: detach failed: %s", exc)
            self._drop_locked()

    def _drop_locked(self) -> None:
        if self._tier is not None:
            self._tier.close()
        if self._client is not None:
            self._client.close()
        self._tier = self._client = None

    def _back_off_locked(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        self._quiet_until = self._clock() + self._retry_s
        rpc = isinstance(exc, grpc.RpcError) and hasattr(exc, "code")
        code = exc.code() if rpc else None  # type: ignore[attr-defined]
        detail = exc.details() if rpc else exc  # type: ignore[attr-defined]
        log.warning(
            "infercache: %s failed (%s: %s); serving without the KV cache for %.1f s",
            what,
            code.name if code is not None else type(exc).__name__,
            detail,
            self._retry_s,
        )
