"""A fake KV sidecar for SidecarLink and the connector's scheduler half (pure logic tests).

FakeSidecar can freeze (every call then waits for its deadline, as against a SIGSTOPped
process, and fails DEADLINE_EXCEEDED), thaw, and restart (attachments made before are
unknown: FAILED_PRECONDITION, as the real sidecar answers). `connect` is what SidecarLink
takes to open a client; FakeClock is its back-off clock, moved by hand. fake_request,
fake_blocks and fake_step are what vLLM hands the scheduler half; fake_link is a
SidecarLink on the fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import grpc
from infercache.v1 import kv_pb2 as pb
from infercache_client.vllm.link import Attacher, SidecarLink


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    """A grpc.RpcError with a status code and details, as the real stubs raise."""

    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class FakeMatch:
    slot_ids: tuple[int, ...]
    lease: Any
    slot_generations: tuple[int, ...] = ()
    promoted_blocks: int = 0
    retry_later: bool = False

    @property
    def matched_blocks(self) -> int:
        return len(self.slot_ids)


@dataclass(frozen=True)
class FakeLease:
    lease_id: str
    ttl_ms: int = 0


@dataclass
class FakeSidecar:
    """Blocks by hash; `generation` counts restarts (a restart forgets attachments)."""

    cached: set[bytes] = field(default_factory=set)
    generation: int = 1
    attaches: int = 0
    released: list[str] = field(default_factory=list)
    lookups: int = 0
    lease_ttl_ms: int = 0
    """The ttl leases are granted with (0: none said, so a probe's hold is never taken over)."""
    _thawed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thawed.set()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def restart(self) -> None:
        self.generation += 1
        self.cached.clear()

    def answer(self, timeout_s: float) -> None:
        """Return when the sidecar would answer, or fail at the deadline."""
        if not self._thawed.wait(timeout_s):
            raise FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def connect(self, target: str, timeout_s: float) -> Attacher:
        """SidecarLink's `connect`: a client of this fake sidecar."""
        return cast(Attacher, FakeClient(self, timeout_s))


@dataclass
class FakePool:
    num_slots: int = 64


class FakeTier:
    """One attachment: LookupPrefix and Release against the fake sidecar."""

    max_chain_blocks = 4096
    renewer = None

    def __init__(self, sidecar: FakeSidecar, timeout_s: float) -> None:
        self.sidecar, self.timeout_s = sidecar, timeout_s
        self.generation = sidecar.generation
        self.pool_id = f"pool-{self.generation}"
        self.scope_id = "scope"
        self.pool = FakePool()
        self.alive = True
        self.closed = False
        self._leases = 0

    def _call(self, timeout_s: float | None) -> None:
        self.sidecar.answer(self.timeout_s if timeout_s is None else timeout_s)
        if self.generation != self.sidecar.generation:
            raise FakeRpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "unknown KV attachment 'a1' (detached, or expired after 30000 ms without a "
                "call); call AttachHotTier",
            )

    def lookup_prefix(
        self,
        tenant: str,
        block_hashes: Sequence[bytes],
        *,
        cache_salt: str = "",
        timeout_s: float | None = None,
        hot_only: bool = False,
    ) -> FakeMatch:
        self._call(timeout_s)
        self.sidecar.lookups += 1
        matched = 0
        while matched < len(block_hashes) and block_hashes[matched] in self.sidecar.cached:
            matched += 1
        self._leases += 1
        lease = FakeLease(f"lease-{self._leases}", self.sidecar.lease_ttl_ms) if matched else None
        return FakeMatch(tuple(range(matched)), lease, (1,) * matched)

    def release(self, lease_id: str) -> int:
        self._call(None)
        self.sidecar.released.append(lease_id)
        return 1

    def close(self) -> None:
        self.closed = True

    def detach(self) -> int:
        self.close()
        return 0


class FakeClient:
    """What SidecarLink's `connect` returns."""

    def __init__(self, sidecar: FakeSidecar, timeout_s: float) -> None:
        self.sidecar, self.timeout_s = sidecar, timeout_s

    def attach(self, *, timeout_s: float, **_: Any) -> FakeTier:
        self.sidecar.answer(timeout_s)
        self.sidecar.attaches += 1
        return FakeTier(self.sidecar, self.timeout_s)

    def close(self) -> None:
        pass


def fake_request(req_id: str, prompt: list[int]) -> Any:
    """What the scheduler half reads of a vLLM request (no salt, adapter or media)."""
    return SimpleNamespace(
        request_id=req_id,
        prompt_token_ids=prompt,
        cache_salt=None,
        lora_request=None,
        prompt_embeds=None,
        mm_features=None,
        num_computed_tokens=0,
    )


def fake_blocks(ids: list[int]) -> Any:
    """vLLM's KVCacheBlocks of one group."""
    return SimpleNamespace(get_block_ids=lambda: (ids,))


def fake_step(new: list[tuple[Any, list[int]]]) -> Any:
    """A scheduler output that prefills `new` (request, block ids) completely."""
    return SimpleNamespace(
        num_scheduled_tokens={r.request_id: len(r.prompt_token_ids) for r, _ in new},
        scheduled_new_reqs=[
            SimpleNamespace(req_id=r.request_id, block_ids=(ids,), num_computed_tokens=0)
            for r, ids in new
        ],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=[], new_block_ids=[], resumed_req_ids=set(), num_computed_tokens=[]
        ),
    )


def fake_link(
    sidecar: FakeSidecar,
    *,
    timeout_s: float,
    attach_timeout_s: float = 5.0,
    retry_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    process_name: str = "test",
) -> SidecarLink:
    """A SidecarLink to `sidecar` (not attached yet)."""
    return SidecarLink(
        "fake:0",
        model_fingerprint="fp",
        layout=pb.KvLayout(),
        process_name=process_name,
        timeout_s=timeout_s,
        attach_timeout_s=attach_timeout_s,
        retry_s=retry_s,
        clock=clock,
        connect=sidecar.connect,
    )
