"""KvCacheService calls: attach, look up, allocate, commit, release, renew.

RPC failures surface as grpc.RpcError with the sidecar's status code, as in the
base client: RESOURCE_EXHAUSTED when too few slots are unpinned, FAILED_PRECONDITION
once another model version has attached (this attachment is superseded) or for an
unknown, released or expired lease.

Liveness: the sidecar reclaims an attachment it has not heard from for its
attachment ttl (a process that died without detaching), so HotTier renews it in
the background (RenewAttachment) until closed; `alive` turns False once the
sidecar refuses (reclaimed, detached or superseded: attach again).

Fencing: LookupPrefix answers each slot with its generation. A copy out of slots
whose lease was released, or may lapse, before the copy finished can be torn by the
slot's reuse; `torn_blocks` (or `read_verified`) compares generations after the
copy and names the blocks to recompute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import torch
from infercache.v1 import kv_pb2 as PB2
from infercache.v1 import kv_pb2_grpc

from infercache_client.kv.leases import LeaseRenewer
from infercache_client.kv.pool import KvPool, LayerKV, device_uuid, map_pool

# The renewer's key for the attachment itself (lease ids are bare hex).
_ATTACHMENT_KEY = "attachment"


@dataclass(frozen=True, slots=True)
class Lease:
    """Pins slots until released or expired."""

    lease_id: str
    ttl_ms: int
    expires_at_unix_ms: int
    """Sidecar clock."""

    @classmethod
    def from_pb(cls, msg: PB2.Lease) -> Lease | None:
        """None for an empty lease (nothing pinned)."""
        if not msg.lease_id:
            return None
        return cls(msg.lease_id, msg.ttl_ms, msg.expires_at_unix_ms)


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Longest cached prefix of a block chain, as pinned slots."""

    slot_ids: tuple[int, ...]
    lease: Lease | None
    retry_later: bool
    """More of the chain is in the warm tier but promotion missed the sidecar's time bound."""
    retry_after_ms: int
    promoted_blocks: int
    """Blocks of this match that were promoted from the warm tier by this call."""
    slot_generations: tuple[int, ...] = ()
    """Per slot, its generation when matched (empty from sidecars without fencing)."""

    @property
    def matched_blocks(self) -> int:
        """Number of leading blocks found."""
        return len(self.slot_ids)


@dataclass(frozen=True, slots=True)
class Allocation:
    """Slots reserved for new blocks, pinned under `lease`."""

    slot_ids: tuple[int, ...]
    lease: Lease
    slot_generations: tuple[int, ...] = ()
    """Per slot, its generation once allocated."""


@dataclass(frozen=True, slots=True)
class VerifiedRead:
    """A copy of a prefix's KV, cut at the first block whose slot was reused under it."""

    kv: list[LayerKV]
    """Per layer (K, V) of the first valid_blocks blocks."""
    valid_blocks: int
    torn: tuple[int, ...]
    """Positions (in the match) of blocks whose copy may be torn: recompute them."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What CommitBlocks published."""

    committed_blocks: int
    already_cached: tuple[bool, ...]
    """Per block: the hash was cached in another slot already (this slot stays private)."""


class KvCacheClient:
    """Blocking KvCacheService client. `target` is "host:port" or "unix:/path/to.sock"."""

    def __init__(self, target: str, *, timeout_s: float = 5.0) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = kv_pb2_grpc.KvCacheServiceStub(self._channel)
        self._timeout_s = timeout_s

    def attach(
        self,
        *,
        model_fingerprint: str,
        layout: PB2.KvLayout,
        adapter_fingerprint: str = "",
        device: torch.device | str | None = None,
        process_name: str = "",
        renew_leases: bool = True,
        keep_alive: bool = True,
        timeout_s: float = 60.0,
        tenants: Sequence[str] = (),
        domain_key_file: str | None = None,
    ) -> HotTier:
        """Attach this model process and map the pool.

        `device` is where the model runs; for a CUDA device its UUID is sent so a CUDA
        pool is opened on that GPU. `tenants`: the only tenants this attachment may name
        (required when the sidecar has trust domains, with `domain_key_file`: the
        domain's key file, read at every attach since the sidecar rewrites it at start;
        PERMISSION_DENIED otherwise). With renew_leases, leases from lookup_prefix and
        allocate are renewed in the background until released; with keep_alive, the
        attachment itself is renewed until the HotTier is closed.
        """
        gpu_uuid = ""
        if device is not None and torch.device(device).type == "cuda":
            gpu_uuid = device_uuid(device)
        req = PB2.AttachHotTierRequest(
            model_fingerprint=model_fingerprint,
            adapter_fingerprint=adapter_fingerprint,
            layout=layout,
            gpu_uuid=gpu_uuid,
            process_name=process_name,
            tenants=list(tenants),
            domain_key=_read_key(domain_key_file) if domain_key_file else b"",
        )
        resp: PB2.AttachHotTierResponse = self._stub.AttachHotTier(req, timeout=timeout_s)
        return HotTier(
            self._stub, resp, map_pool(resp.pool), self._timeout_s, renew_leases, keep_alive
        )

    def close(self) -> None:
        """Close the channel (attachments made through it stop working)."""
        self._channel.close()

    def __enter__(self) -> KvCacheClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HotTier:
    """One attachment: the mapped pool plus the slot RPCs, all scoped to this model version."""

    def __init__(
        self,
        stub: kv_pb2_grpc.KvCacheServiceStub,
        resp: PB2.AttachHotTierResponse,
        pool: KvPool,
        timeout_s: float,
        renew_leases: bool,
        keep_alive: bool = True,
    ) -> None:
        """Built by KvCacheClient.attach."""
        self._stub = stub
        self._timeout_s = timeout_s
        self.attachment_id = resp.attachment_id
        self.scope_id = resp.scope_id
        self.layout = resp.layout
        self.pool_id = resp.pool.pool_id
        self.trust_domain = resp.trust_domain
        """The trust domain whose pool this is ("" when the sidecar has none)."""
        self.max_chain_blocks = resp.max_chain_blocks
        self.default_lease_ttl_ms = resp.default_lease_ttl_ms
        self.max_lease_ttl_ms = resp.max_lease_ttl_ms
        self.attachment_ttl_ms = resp.attachment_ttl_ms
        """0: the sidecar never reclaims attachments (nothing to renew)."""
        self.pool = pool
        self.torn_reads = 0
        """Blocks torn_blocks found torn so far."""
        self._renew_leases = renew_leases
        keep = keep_alive and self.attachment_ttl_ms > 0
        self.renewer = LeaseRenewer(self._renew_any) if renew_leases or keep else None
        if keep and self.renewer is not None:
            self.renewer.track(_ATTACHMENT_KEY, self.attachment_ttl_ms)

    @property
    def alive(self) -> bool:
        """False once the sidecar refused to renew the attachment (reclaimed, detached or
        superseded): attach again. True when it is not renewed here."""
        return self.renewer is None or _ATTACHMENT_KEY not in self.renewer.lost()

    def lookup_prefix(
        self,
        tenant: str,
        block_hashes: Sequence[bytes],
        *,
        cache_salt: str = "",
        lease_ttl_ms: int = 0,
        hot_only: bool = False,
        timeout_s: float | None = None,
    ) -> PrefixMatch:
        """Longest cached prefix of `block_hashes` (chain_hashes output), pinned under a
        lease. `timeout_s` overrides the client's deadline for this call."""
        req = PB2.LookupPrefixRequest(
            attachment_id=self.attachment_id,
            tenant=tenant,
            cache_salt=cache_salt,
            block_hashes=list(block_hashes),
            lease_ttl_ms=lease_ttl_ms,
            hot_only=hot_only,
        )
        timeout = self._timeout_s if timeout_s is None else timeout_s
        resp: PB2.LookupPrefixResponse = self._stub.LookupPrefix(req, timeout=timeout)
        lease = Lease.from_pb(resp.lease)
        self._track(lease)
        return PrefixMatch(
            slot_ids=tuple(resp.slot_ids),
            lease=lease,
            retry_later=resp.retry_later,
            retry_after_ms=resp.retry_after_ms,
            promoted_blocks=resp.promoted_blocks,
            slot_generations=tuple(resp.slot_generations),
        )

    def torn_blocks(self, slot_ids: Sequence[int], generations: Sequence[int]) -> tuple[int, ...]:
        """Positions of the blocks whose slot was allocated again since `generations` were
        handed out: a copy of them taken since may be torn. Call it after the copy
        finished (on CUDA: after synchronising its stream). () when the sidecar shares no
        generations (nothing can be checked: keep the lease until the copy is done)."""
        torn = self.pool.changed(slot_ids, generations)
        self.torn_reads += len(torn)
        return torn

    def read_verified(
        self, match: PrefixMatch, device: torch.device | str | None = None
    ) -> VerifiedRead:
        """Copy the match's KV (KvPool.read_prefix), then check it was not torn: the copy
        is cut before the first torn block (the rest must be recomputed)."""
        kv = self.pool.read_prefix(match.slot_ids, device)
        # The check must follow the copy itself, not its launch on a CUDA stream.
        if self.pool.device.type == "cuda":
            torch.cuda.synchronize(self.pool.device)
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        torn = self.torn_blocks(match.slot_ids, match.slot_generations)
        valid = torn[0] if torn else len(match.slot_ids)
        tokens = valid * self.pool.tokens_per_block
        return VerifiedRead([(k[:tokens], v[:tokens]) for k, v in kv], valid, torn)

    def allocate(self, count: int, *, lease_id: str = "", lease_ttl_ms: int = 0) -> Allocation:
        """Reserve `count` free slots (all or nothing), added to `lease_id` or a new lease."""
        req = PB2.AllocateBlocksRequest(
            attachment_id=self.attachment_id,
            count=count,
            lease_id=lease_id,
            lease_ttl_ms=lease_ttl_ms,
        )
        resp: PB2.AllocateBlocksResponse = self._stub.AllocateBlocks(req, timeout=self._timeout_s)
        lease = Lease.from_pb(resp.lease)
        if lease is None:
            raise RuntimeError("AllocateBlocks answered without a lease")
        self._track(lease)
        return Allocation(tuple(resp.slot_ids), lease, tuple(resp.slot_generations))

    def commit(
        self,
        lease_id: str,
        tenant: str,
        slot_ids: Sequence[int],
        block_hashes: Sequence[bytes],
        *,
        cache_salt: str = "",
    ) -> CommitResult:
        """Publish written slots under their block hashes (pairwise, in order).

        Waits for queued device writes to the pool first, so a reader never sees a
        published slot before its bytes.
        """
        if len(slot_ids) != len(block_hashes):
            raise ValueError(f"{len(slot_ids)} slots but {len(block_hashes)} block hashes")
        self.pool.synchronize()
        req = PB2.CommitBlocksRequest(
            attachment_id=self.attachment_id,
            lease_id=lease_id,
            tenant=tenant,
            cache_salt=cache_salt,
            blocks=[
                PB2.BlockCommit(slot_id=s, block_hash=h)
                for s, h in zip(slot_ids, block_hashes, strict=True)
            ],
        )
        resp: PB2.CommitBlocksResponse = self._stub.CommitBlocks(req, timeout=self._timeout_s)
        return CommitResult(resp.committed_blocks, tuple(resp.already_cached))

    def release(self, lease_id: str) -> int:
        """Unpin every slot of a lease; returns how many were unpinned."""
        if self.renewer is not None:
            self.renewer.forget(lease_id)
        req = PB2.ReleaseRequest(attachment_id=self.attachment_id, lease_id=lease_id)
        resp: PB2.ReleaseResponse = self._stub.Release(req, timeout=self._timeout_s)
        return resp.released_slots

    def renew(self, lease_id: str, *, lease_ttl_ms: int = 0) -> Lease:
        """Extend a lease to `lease_ttl_ms` from now (0: the sidecar default)."""
        req = PB2.RenewLeaseRequest(
            attachment_id=self.attachment_id, lease_id=lease_id, lease_ttl_ms=lease_ttl_ms
        )
        resp: PB2.RenewLeaseResponse = self._stub.RenewLease(req, timeout=self._timeout_s)
        lease = Lease.from_pb(resp.lease)
        if lease is None:
            raise RuntimeError("RenewLease answered without a lease")
        return lease

    def renew_attachment(self) -> int:
        """Tell the sidecar this process is alive (done in the background unless attached
        with keep_alive=False); returns the attachment's ttl in milliseconds."""
        req = PB2.RenewAttachmentRequest(attachment_id=self.attachment_id)
        resp: PB2.RenewAttachmentResponse = self._stub.RenewAttachment(req, timeout=self._timeout_s)
        return resp.attachment_ttl_ms

    def detach(self) -> int:
        """End the attachment (its leases are released); returns the slots unpinned."""
        self.close()
        req = PB2.DetachHotTierRequest(attachment_id=self.attachment_id)
        resp: PB2.DetachHotTierResponse = self._stub.DetachHotTier(req, timeout=self._timeout_s)
        return resp.released_slots

    def close(self) -> None:
        """Stop renewing leases and the attachment (they expire on the sidecar unless
        released or detached)."""
        if self.renewer is not None:
            self.renewer.close()

    def __enter__(self) -> HotTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _track(self, lease: Lease | None) -> None:
        if self._renew_leases and self.renewer is not None and lease is not None:
            self.renewer.track(lease.lease_id, lease.ttl_ms)

    def _renew_any(self, key: str) -> int:
        if key == _ATTACHMENT_KEY:
            return self.renew_attachment()
        return self.renew(key).ttl_ms


def _read_key(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4096).strip()
