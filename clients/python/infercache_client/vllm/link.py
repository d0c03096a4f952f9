"""One role's attachment to the sidecar, kept alive across sidecar failures.

Both halves of the connector (scheduler and worker) hold a SidecarLink. tier() never
waits for the sidecar: it answers the current attachment, or None while there is none
(then the connector behaves as if the cache were empty and vLLM serves at full speed
with 0 external tokens). Attaching (bounded by `attach_timeout_s`, seconds against a
frozen sidecar) runs on a background thread, one at a time, so nothing on vLLM's engine
loop ever waits for it; attach_now() is the blocking form, used once at engine start.

A failed RPC drops the attachment and its channel. A deadline or a refused attach backs
off for `retry_s` (a slow or frozen sidecar is left alone); an attachment the sidecar no
longer knows (it restarted, or reclaimed it after a freeze longer than its expiry), one
whose renewal lapsed or was refused, or a channel that lost its sidecar (UNAVAILABLE) is
attached again at once on a fresh channel (gRPC's own reconnect back-off can grow to
minutes, a new channel does not wait for it); only if that attach fails does the link
back off. "At once" is at most once per retry_s: an attachment younger than that is
replaced when it is retry_s old, so a sidecar that keeps forgetting attachments (or
answers UNAVAILABLE for its own reasons) is not asked more often than a back-off would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import grpc
from infercache.v1 import kv_pb2 as PB2

from infercache_client.kv.client import HotTier, KvCacheClient

log = logging.getLogger("infercache_client.vllm")

T = TypeVar("T")


class Attacher(Protocol):
    """What the link needs of a KvCacheClient (a fake in tests)."""

    def attach(
        self,
        *,
        model_fingerprint: str,
        layout: PB2.KvLayout,
        process_name: str,
        timeout_s: float,
        tenants: Sequence[str],
        domain_key_file: str | None,
    ) -> HotTier:
        """AttachHotTier and map the pool."""
        ...

    def close(self) -> None:
        """Close the channel."""
        ...


def _connect(target: str, timeout_s: float) -> Attacher:
    return KvCacheClient(target, timeout_s=timeout_s)


def reattach_at_once(exc: BaseException) -> bool:
    """The failure says the attachment or its channel is gone, not that the sidecar is
    slow: a restarted sidecar answers FAILED_PRECONDITION "unknown KV attachment" (or,
    on a channel that saw it die, UNAVAILABLE) and takes a new attach at once."""
    if not isinstance(exc, grpc.RpcError) or not hasattr(exc, "code"):
        return False
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    details = exc.details() if hasattr(exc, "details") else ""
    return code == grpc.StatusCode.FAILED_PRECONDITION and "unknown KV attachment" in (
        details or ""
    )


class SidecarLink:
    """An attachment made and remade in the background, with failure back-off. Thread-safe."""

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
        connect: Callable[[str, float], Attacher] = _connect,
    ) -> None:
        """`timeout_s` bounds every RPC but the attach (`attach_timeout_s`). The
        attachment is bound to `tenant` (the only tenant it may name) and, when the
        sidecar has trust domains, proves its domain with `domain_key_file`. `clock`
        times the back-off; `connect(target, timeout_s)` opens a client."""
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
        self._connect = connect
        self._cond = threading.Condition()
        self._client: Attacher | None = None
        self._tier: HotTier | None = None
        self._quiet_until = 0.0
        self._attached_at = -retry_s
        self._attaching = False
        self._closed = False
        # Releases are fire-and-forget: a finished request must not wait for the sidecar.
        self._releases = ThreadPoolExecutor(1, thread_name_prefix="infercache-release")
        self.failures = 0
        """RPCs (attaches included) that failed."""
        self.attaches = 0
        """Successful attaches (more than one: the sidecar was lost and found again)."""
        self.back_offs = 0
        """Failures after which the link left the sidecar alone for retry_s."""

    def tier(self) -> HotTier | None:
        """The attachment, or None (an attach is started in the background unless one
        runs or the link backs off). Never waits for the sidecar."""
        with self._cond:
            tier = self._tier
            if tier is not None and not tier.alive:
                # Its renewal lapsed or was refused (reclaimed, superseded): attach again.
                log.warning("infercache: the sidecar dropped this attachment; attaching again")
                self._drop_locked()
                self._reattach_soon_locked()
                tier = None
            if tier is None:
                self._start_attach_locked()
            return tier

    def attach_now(self) -> HotTier | None:
        """The attachment, attaching on this thread if needed (waits up to
        `attach_timeout_s`; for engine start, never for a request)."""
        with self._cond:
            deadline = time.monotonic() + self._attach_timeout_s
            while self._attaching and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            if self._tier is not None or self._attaching or self._closed:
                return self._tier
            self._attaching = True
        return self._attach()

    def call(self, what: str, fn: Callable[[HotTier], T]) -> T | None:
        """fn(tier), or None when there is no attachment or the call fails (then drop it)."""
        tier = self.tier()
        if tier is None:
            return None
        try:
            return fn(tier)
        except Exception as exc:
            self.fail(what, exc, tier)
            return None

    def release(self, tier: HotTier, lease_id: str) -> None:
        """Release a lease taken through `tier`, in the background. Never backs off: a
        lease of an attachment that is gone (sidecar restarted) is gone with it, and an
        unreleased one expires (its renewal stops here at once)."""
        if tier.renewer is not None:
            tier.renewer.forget(lease_id)
        with self._cond:
            if tier is self._tier and not self._closed:
                self._releases.submit(self._release, tier, lease_id)

    def _release(self, tier: HotTier, lease_id: str) -> None:
        with self._cond:
            if tier is not self._tier:
                return
        try:
            tier.release(lease_id)
        except Exception as exc:
            log.debug("infercache: release of %s failed: %s", lease_id, exc)

    def reset(self, tier: HotTier) -> None:
        """Drop `tier` and attach again in the background (the scheduler half saw a newer
        pool, i.e. the sidecar restarted)."""
        with self._cond:
            if tier is self._tier:
                self._drop_locked()
                self._reattach_soon_locked()

    def fail(self, what: str, exc: BaseException, tier: HotTier | None = None) -> None:
        """Drop the attachment `tier` (if still current); attach again at once if the
        sidecar forgot it, else back off."""
        with self._cond:
            if tier is not None and tier is not self._tier:
                return  # another thread dropped it already
            self._drop_locked()
            if tier is not None and reattach_at_once(exc):
                self.failures += 1
                log.warning("infercache: %s failed (%s); attaching again", what, _describe(exc))
                self._reattach_soon_locked()
            else:
                self._back_off_locked(what, exc)

    def close(self) -> None:
        """Detach (best effort) and close the channel."""
        with self._cond:
            self._closed = True
            tier, client = self._tier, self._client
            self._tier = self._client = None
            self._releases.shutdown(wait=False, cancel_futures=True)
        if tier is not None:
            try:
                tier.detach()
            except Exception as exc:  # the sidecar may be gone: its leases expire
                log.debug("infercache: detach failed: %s", exc)
        if client is not None:
            client.close()

    def _reattach_soon_locked(self) -> None:
        """Attach again at once, unless the attachment just lost is younger than retry_s:
        a sidecar that keeps forgetting (or a channel that keeps failing) costs at most
        one attach per retry_s, as a back-off would."""
        earliest = self._attached_at + self._retry_s
        if self._clock() < earliest:
            self.back_offs += 1
        self._quiet_until = earliest
        self._start_attach_locked()

    def _start_attach_locked(self) -> None:
        if self._attaching or self._closed or self._clock() < self._quiet_until:
            return
        self._attaching = True
        threading.Thread(target=self._attach, name="infercache-attach", daemon=True).start()

    def _attach(self) -> HotTier | None:
        """One attach (the caller set _attaching); installs the attachment or backs off."""
        client = self._connect(self._target, self._timeout_s)
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
            with self._cond:
                self._attaching = False
                self._back_off_locked("attach", exc)
                self._cond.notify_all()
            return None
        with self._cond:
            self._attaching = False
            self._cond.notify_all()
            closed = self._closed
            if not closed:
                self._client, self._tier = client, tier
                self._attached_at = self._clock()
                self.attaches += 1
        if closed:  # shut down while attaching: undo it
            _close_quietly(tier, client, detach=True)
            return None
        log.info(
            "infercache: attached to %s (scope %s, pool %s, %d slots)",
            self._target,
            tier.scope_id[:16],
            tier.pool_id,
            tier.pool.num_slots,
        )
        return tier

    def _drop_locked(self) -> None:
        tier, client = self._tier, self._client
        self._tier = self._client = None
        if tier is not None or client is not None:
            # Stopping the renewer waits for its RPC in flight: never on the caller's thread.
            threading.Thread(
                target=_close_quietly, args=(tier, client), name="infercache-drop", daemon=True
            ).start()

    def _back_off_locked(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        self.back_offs += 1
        self._quiet_until = self._clock() + self._retry_s
        log.warning(
            "infercache: %s failed (%s); serving without the KV cache for %.1f s",
            what,
            _describe(exc),
            self._retry_s,
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return f"{exc.code().name}: {exc.details() if hasattr(exc, 'details') else ''}"
    return f"{type(exc).__name__}: {exc}"


def _close_quietly(tier: HotTier | None, client: Attacher | None, *, detach: bool = False) -> None:
    try:
        if tier is not None:
            if detach:
                tier.detach()
            else:
                tier.close()
    except Exception as exc:  # the sidecar may be gone: its leases expire
        log.debug("infercache: closing an attachment failed: %s", exc)
    finally:
        if client is not None:
            client.close()
