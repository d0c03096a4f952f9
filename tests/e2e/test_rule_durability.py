"""A confirmed invalidation survives Redis faults: a crash and restore from a snapshot
that predates the rule, and a reset to empty while sidecars holding entries were frozen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import redis
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, admin_invalidate, fill

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(120)]


@pytest.fixture
def started() -> Iterator[list[SidecarProcess]]:
    """Sidecar processes a test starts; all stopped afterwards."""
    procs: list[SidecarProcess] = []
    yield procs
    for p in procs:
        p.stop()


def _start(procs: list[SidecarProcess], url: str) -> SidecarProcess:
    p = SidecarProcess(url)
    procs.append(p)
    p.wait_ready()
    return p


def _store_or_code(c: CacheClient, k: pb.CacheKey, lease: bytes) -> Any:
    """The Store's outcome, or the status code it failed with."""
    try:
        return c.store(k, b"answer", lease=lease).outcome
    except grpc.RpcError as exc:
        return exc.code()


def _make_hot(c: CacheClient, k: pb.CacheKey) -> None:
    assert c.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
    assert c.lookup(k).tier == pb.TIER_HOT


def test_rule_survives_a_crash_and_restore_from_a_snapshot_without_it(
    own_redis: RedisServer, started: list[SidecarProcess]
) -> None:
    """Store, SAVE, Invalidate (OK), SIGKILL Redis, restart from the dump (entry back,
    rule gone): a sidecar started afterwards used to serve the invalidated entry. Now
    the sidecar that holds the rule re-publishes it and the new one waits for the
    restarted store to settle before serving: both miss."""
    s = _start(started, own_redis.url)
    k = key("what is the refund window?")
    with CacheClient(s.target) as cs:
        fill(cs, k, b"30 days (old policy)")
    r = redis.Redis(port=own_redis.port)
    [entry] = r.keys("ic:v2:r:*")
    r.save()
    admin_invalidate(s, tenant="acme")
    # Reclaim (by the sidecar that holds the rule) removes the entry from the running
    # Redis; the dump still has it.
    deadline = time.monotonic() + 20
    while r.exists(entry):
        assert time.monotonic() < deadline, "reclaim did not remove the dead entry"
        time.sleep(0.05)
    r.close()
    own_redis.kill()
    own_redis.start()
    with redis.Redis(port=own_redis.port) as r:
        assert r.exists(entry), "restored from the dump"
    n = _start(started, own_redis.url)
    with CacheClient(n.target) as cn, CacheClient(s.target) as cs:
        for c in (cn, cs):
            assert c.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
    with redis.Redis(port=own_redis.port) as r:
        assert r.zcard("ic:v2:{meta}:rules") == 1, "re-published by the sidecar holding it"


def test_frozen_sidecars_serve_no_stale_hit_after_a_redis_reset(
    own_redis: RedisServer, started: list[SidecarProcess]
) -> None:
    """S and S2 hold an entry hot (stamped at epoch 3); both SIGSTOPped; Redis restarted
    empty; a new sidecar's Invalidate (numbered 1 by the empty store) returns OK; S and
    S2 resume. They used to serve it ~20 times each (rule 1 < stamp 3, and rule 1 was
    never fetched); now neither serves it once: the data set changed identity while they
    were away, so their hot tiers are dropped before they serve again."""
    s, s2 = _start(started, own_redis.url), _start(started, own_redis.url)
    for i in range(3):
        admin_invalidate(s, tenant=f"earlier-{i}")
    k = key("which plan am I on?")
    with CacheClient(s.target) as cs, CacheClient(s2.target) as cs2:
        fill(cs, k, b"stale plan")
        _make_hot(cs, k)
        _make_hot(cs2, k)
        s.freeze()
        s2.freeze()
        own_redis.kill()
        own_redis.start()
        n = _start(started, own_redis.url)
        assert admin_invalidate(n, tenant="acme").record.epoch >= 1
        s.thaw()
        s2.thaw()
        stale = 0
        for _ in range(20):
            for c in (cs, cs2):
                found = c.lookup(k)
                stale += found.outcome == pb.LOOKUP_OUTCOME_HIT
            time.sleep(0.05)
        assert stale == 0


def test_sidecars_agree_on_the_lease_secret_again_after_a_redis_reset(
    own_redis: RedisServer, started: list[SidecarProcess]
) -> None:
    """Without INFERCACHE_LEASE_SECRET the fleet shares a secret through Redis. Redis
    restarted empty and a sidecar started afterwards made a new one; leases of the
    older sidecar then stopped verifying on the new one (INVALID_ARGUMENT) until the
    older one restarted. Now the older one adopts the store's secret when it sees the
    data set lost, and a lease it issues is accepted by the new sidecar."""
    old = SidecarProcess(own_redis.url, lease_secret="")
    started.append(old)
    old.wait_ready()
    own_redis.kill()
    own_redis.start()
    new = SidecarProcess(own_redis.url, lease_secret="")
    started.append(new)
    new.wait_ready()
    k = key("which secret?")
    with CacheClient(old.target) as co, CacheClient(new.target) as cn:
        deadline = time.monotonic() + 10
        while True:
            lease = co.lookup(k).lease
            stored = _store_or_code(cn, k, lease) if lease else None
            if stored == pb.STORE_OUTCOME_STORED:
                break
            # Until the old sidecar's next refresh it still signs with the lost secret.
            assert stored in (None, grpc.StatusCode.INVALID_ARGUMENT)
            assert time.monotonic() < deadline, "the old sidecar's leases never verified"
            time.sleep(0.2)
