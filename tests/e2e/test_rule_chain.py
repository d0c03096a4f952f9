"""Issue 25 repro 2, with real processes: a Redis writer without the fleet secret deletes
the rules a confirmed Invalidate committed and puts back the entry it killed. A sidecar
started afterwards (a new pod of a rollout) used to serve the invalidated answer; now it
finds the rule chain broken and fails closed (no hit, alert metric, log line), and an
INFERCACHE_MIN_EPOCH pod serves nothing until the rule set reaches its epoch."""

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
from tests.support.metrics import event_counters
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, admin_invalidate, fill

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(180)]

META = "ic:v2:{meta}:"


@pytest.fixture
def started() -> Iterator[list[SidecarProcess]]:
    """Sidecar processes a test starts; all stopped afterwards."""
    procs: list[SidecarProcess] = []
    yield procs
    for p in procs:
        p.stop()


def _start(procs: list[SidecarProcess], url: str, **settings: Any) -> SidecarProcess:
    p = SidecarProcess(url, metrics=True, **settings)
    procs.append(p)
    p.wait_ready()
    return p


def test_deleted_rules_and_a_replanted_entry_give_a_new_pod_no_hit(
    own_redis: RedisServer, started: list[SidecarProcess]
) -> None:
    """Store an answer; `invalidate --prompt-version p1` (confirmed); as the attacker
    delete the rules, the head and the anchor and put back the saved entry bytes. A
    sidecar started afterwards used to serve the invalidated answer; now it answers a
    degraded MISS, counts infercache_rules_events{event="distrusted"}, logs
    store_distrusted, and its Invalidate is UNAVAILABLE naming the rule chain."""
    a = _start(started, own_redis.url)
    k = key("what is the refund window?", prompt_version="p1")
    with CacheClient(a.target) as ca:
        fill(ca, k, b"30 days (old prompt)")
    raw = redis.Redis(port=own_redis.port)
    [entry_key] = raw.keys("ic:v2:r:*")
    genuine = raw.get(entry_key)
    assert genuine is not None
    assert admin_invalidate(a, prompt_version="p1").record.epoch == 1
    a.stop()  # the rollout replaced it

    raw.delete(META + "rules", META + "head", META + "anchor")
    raw.set(entry_key, genuine)
    raw.close()

    b = _start(started, own_redis.url)
    with CacheClient(b.target) as cb:
        for _ in range(5):
            found = cb.lookup(k)
            assert found.outcome == pb.LOOKUP_OUTCOME_MISS, "served the invalidated answer"
            assert found.degraded
            time.sleep(0.1)
    assert event_counters(b, "infercache_rules_events").get("distrusted", 0) >= 1
    assert "store_distrusted" in b.stderr()
    with pytest.raises(grpc.RpcError) as err:
        admin_invalidate(b, tenant="acme")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "rule chain" in (err.value.details() or "")


def test_min_epoch_pod_serves_no_hit_until_the_rules_reach_it(
    own_redis: RedisServer, started: list[SidecarProcess]
) -> None:
    """A pod started with INFERCACHE_MIN_EPOCH=3 on a store whose rules are at epoch 1
    (as after a rollback to an older authentic state) answers MISS for an entry that
    is live; once Invalidate brings the signed rule set to epoch 3, it serves the hit."""
    a = _start(started, own_redis.url)
    k = key("which plan am I on?", tenant="globex")
    with CacheClient(a.target) as ca:
        fill(ca, k, b"the gold plan")
        assert ca.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
    assert admin_invalidate(a, tenant="acme").record.epoch == 1

    b = _start(started, own_redis.url, min_epoch=3)
    with CacheClient(b.target) as cb:
        for _ in range(3):
            found = cb.lookup(k)
            assert found.outcome == pb.LOOKUP_OUTCOME_MISS, "served below INFERCACHE_MIN_EPOCH"
            time.sleep(0.1)
        assert admin_invalidate(a, tenant="acme").record.epoch == 2
        assert cb.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
        assert admin_invalidate(a, tenant="initech").record.epoch == 3
        deadline = time.monotonic() + 10
        while cb.lookup(k).outcome != pb.LOOKUP_OUTCOME_HIT:
            assert time.monotonic() < deadline, "hits never resumed at the minimum epoch"
            time.sleep(0.1)
    assert event_counters(b, "infercache_rules_events").get("below_min_epoch", 0) >= 1
    assert event_counters(b, "infercache_rules_events").get("distrusted", 0) == 0
