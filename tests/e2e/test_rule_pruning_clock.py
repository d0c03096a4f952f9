"""Rules are pruned on the store's clock with the fleet's retention: a sidecar whose own
clock runs ahead (libfaketime) or whose TTLs are shorter deletes no rule still needed."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import grpc
import pytest
import redis
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from sidecar.backends.redis.control import RedisControlStore
from sidecar.invalidation.rules import Selector
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, bearer

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(240)]

RULES = "ic:v2:{meta}:rules"

SETUP_TIMEOUT_S = 10.0


def _libfaketime() -> Path:
    """The multi-threaded libfaketime (gRPC runs threads), or skip where it is missing."""
    for d in ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime"):
        lib = Path(d) / "libfaketimeMT.so.1"
        if lib.exists():
            return lib
    if shutil.which("faketime") is None:
        pytest.skip("needs libfaketime (apt-get install -y faketime)")
    pytest.skip("libfaketimeMT.so.1 not found")


def _invalidate(admin_target: str, tenant: str) -> None:
    with grpc.insecure_channel(admin_target) as channel:
        admin_pb2_grpc.AdminServiceStub(channel).Invalidate(
            admin_pb.InvalidateRequest(selector=admin_pb.Selector(tenant=tenant), reason="purge"),
            metadata=bearer(),
            timeout=10,
        )


def test_a_sidecar_two_days_ahead_prunes_no_fresh_rule(redis_server: RedisServer) -> None:
    """A sidecar whose clock runs 2 days ahead used to prune with its own time.time()
    and TTLs: it deleted the fleet's fresh rule at its first reclaim loop, and a sidecar
    started afterwards accepted (and then served) a result computed before the purge.
    Now the rule stays: that Store is STALE_LEASE and the lookup misses."""
    lib = _libfaketime()
    r = redis.Redis.from_url(redis_server.url)
    a = SidecarProcess(redis_server.url)
    ahead: SidecarProcess | None = None
    fresh: SidecarProcess | None = None
    try:
        a.wait_ready()
        k = key("refund policy", tenant="acme")
        with CacheClient(a.target) as ca:
            # A slow computation starts before the purge...
            # A generous deadline: a new channel's first call on a loaded CI machine took
            # more than the client's default second; latency is not this test's subject.
            lease = ca.lookup(k, timeout=SETUP_TIMEOUT_S).lease
        _invalidate(a.admin_target, "acme")
        assert r.zcard(RULES) == 1

        ahead = SidecarProcess(
            redis_server.url,
            env={"LD_PRELOAD": str(lib), "FAKETIME": "+2d", "FAKETIME_NO_CACHE": "1"},
            max_ttl_s=60,
            default_ttl_s=60,
        )
        # libfaketime without its cache makes every clock read a syscall: a slow start.
        ahead.wait_ready(timeout_s=90)
        # Its reclaim loop prunes on its first pass (a second after start at most).
        time.sleep(3)
        assert ahead.proc.poll() is None, ahead.log()

        fresh = SidecarProcess(redis_server.url)
        fresh.wait_ready()
        with CacheClient(fresh.target) as cf:
            # ...and delivers its result through a sidecar started afterwards.
            late = cf.store(k, b"policy computed before the purge", lease=lease)
            assert late.outcome == pb.STORE_OUTCOME_STALE_LEASE
            assert cf.lookup(k, timeout=SETUP_TIMEOUT_S).outcome == pb.LOOKUP_OUTCOME_MISS
        assert r.zcard(RULES) == 1, "a sidecar with a fast clock pruned a fresh rule"
    finally:
        for s in (a, ahead, fresh):
            if s is not None:
                s.stop()
        r.close()


async def test_prune_uses_the_store_clock_and_the_longest_published_retention(
    redis_server: RedisServer,
) -> None:
    """prune_rules keeps every rule younger than the largest retention any member
    published, whatever the caller asks; with none published it prunes on Redis TIME."""
    long_lived = RedisControlStore(redis_server.url, timeout_s=2)
    short = RedisControlStore(redis_server.url, timeout_s=2)
    try:
        record = await short.commit_invalidation(Selector(tenant="t"), "r", "me", 0)
        await asyncio.sleep(0.05)
        cutoff, removed = await short.prune_rules(0)
        assert removed == 1
        assert cutoff >= record.time_ms  # the store's clock, not ours

        await short.commit_invalidation(Selector(tenant="t"), "r", "me", 0)
        await long_lived.heartbeat("long-lived", 0, 1000, retention_ms=3_600_000)
        await asyncio.sleep(0.05)
        cutoff, removed = await short.prune_rules(0)
        assert removed == 0
        assert len(await short.rules_after(0)) == 1
        assert cutoff < record.time_ms
    finally:
        await long_lived.close()
        await short.close()
