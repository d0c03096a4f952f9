"""Issue 25 item 2: the rules are a signed chain. A Redis writer without the fleet secret
cannot add, alter, remove or reorder a rule undetected: a sidecar that reads such a chain
serves no hits and Invalidate is UNAVAILABLE. The honest paths (pruning, a Redis that
lost its data, Redis Cluster) raise no alarm. Real Redis, in-process sidecars over gRPC;
the attacker is a plain redis-py client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import grpc
import pytest
import redis
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.control import RedisControlStore
from sidecar.invalidation.rules import Selector
from sidecar.macs import FleetKeys, read_secret_file
from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import FLEET_SECRET_FILE, Sidecar, sidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

META = "ic:v2:{meta}:"
RULES = META + "rules"


def _fleet() -> FleetKeys:
    """The tests' fleet secret (what every test sidecar signs with)."""
    return FleetKeys([read_secret_file(FLEET_SECRET_FILE)])


def _raw(store: RedisServer | RedisClusterProcesses) -> redis.Redis:
    """The attacker: a plain client on the Redis holding the {meta} keys."""
    if isinstance(store, RedisClusterProcesses):
        return redis.Redis(port=store.master_of_key(RULES).port)
    return redis.Redis.from_url(store.url)


async def _refused(sc: Sidecar, live: pb.CacheKey, what: str) -> None:
    """`sc` serves no hit (a live entry misses, degraded), names `what`, and refuses
    Invalidate with UNAVAILABLE naming the rule chain."""
    for _ in range(3):
        found = await sc.client.lookup(live)
        assert (found.outcome, found.degraded) == (pb.LOOKUP_OUTCOME_MISS, True)
    distrust = sc.running.freshness.distrust
    assert distrust is not None
    assert what in distrust
    assert sc.running.freshness.trust.distrusted >= 1
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sc.invalidate(tenant="acme")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "rule chain" in (err.value.details() or "")


def _members(raw: redis.Redis) -> list[tuple[bytes, float]]:
    """The rules sorted set as stored: (member, score), in score order."""
    return cast(list[tuple[bytes, float]], raw.zrange(RULES, 0, -1, withscores=True))


def _swap_first_two(raw: redis.Redis) -> None:
    (m1, s1), (m2, s2), _ = _members(raw)
    raw.zadd(RULES, {m1: s2, m2: s1})


def _rewrite_selector(raw: redis.Redis) -> None:
    member, score = _members(raw)[0]
    raw.zrem(RULES, member)
    raw.zadd(RULES, {member.replace(b'"tenant":"acme"', b'"tenant":"nobody"'): score})


def _drop_middle(raw: redis.Redis) -> None:
    raw.zrem(RULES, _members(raw)[1][0])


def _add_forged(raw: redis.Redis) -> None:
    last, score = _members(raw)[-1]
    fields = last.split(b"|", 5)
    forged = b"|".join([b"2", b"9", fields[2], fields[4], b"00" * 32, b'{"all":true}'])
    raw.zadd(RULES, {forged: score + 1})


def _old_format(raw: redis.Redis) -> None:
    raw.zadd(RULES, {b'9|0|{"tenant":"acme"}': 99})


def _drop_newest(raw: redis.Redis) -> None:
    raw.zrem(RULES, _members(raw)[-1][0])


def _delete_chain(raw: redis.Redis) -> None:
    raw.delete(RULES, META + "head", META + "anchor")


TAMPERING: dict[str, tuple[Callable[[redis.Redis], None], str]] = {
    "reordered": (_swap_first_two, "does not follow the rule before it"),
    "selector rewritten": (_rewrite_selector, "fails its MAC"),
    "middle rule removed": (_drop_middle, "does not follow the rule before it"),
    "rule added": (_add_forged, "fails its MAC"),
    "format 1 rule added": (_old_format, "format 2"),
    "newest rule removed": (_drop_newest, "not the one the head names"),
    "rules, head and anchor deleted": (_delete_chain, "missing"),
}


@pytest.mark.parametrize("attack", list(TAMPERING))
async def test_a_tampered_rule_chain_fails_closed_on_a_new_sidecar(
    redis_server: RedisServer, attack: str
) -> None:
    """Three confirmed rules, then the attacker reorders, rewrites, removes or adds one
    (or deletes them all with the head and anchor): a sidecar started afterwards used
    to serve hits by whatever rules it found; now it serves none, says why, counts it,
    and Invalidate is UNAVAILABLE. The sidecar that committed them holds its rules."""
    tamper, what = TAMPERING[attack]
    live = key("live entry", tenant="globex")
    async with sidecar(redis_server.url, hot_max_entries="0") as a:
        await a.fill(live, b"still true")
        for tenant in ("acme", "initech", "umbrella"):
            await a.invalidate(tenant=tenant)
        raw = _raw(redis_server)
        tamper(raw)
        raw.close()
        async with sidecar(redis_server.url, hot_max_entries="0") as b:
            await _refused(b, live, what)


@pytest.mark.parametrize("where", ["single", "cluster"])
async def test_honest_rules_pruning_and_cluster_raise_no_alarm(
    request: pytest.FixtureRequest, where: str
) -> None:
    """Invalidations, then pruning past the oldest (the signed anchor moves), then more
    invalidations, on one Redis and on a Redis Cluster: a new sidecar verifies the chain,
    applies the rules (the invalidated entry misses) and serves hits (no alarm)."""
    store: RedisServer | RedisClusterProcesses = request.getfixturevalue(
        "redis_server" if where == "single" else "redis_cluster"
    )
    control = RedisControlStore(store.url, timeout_s=5, fleet=_fleet())
    try:
        await control.commit_invalidation(Selector(tenant="initech"), "old", "test", 0)
        await control.commit_invalidation(Selector(tenant="umbrella"), "old", "test", 0)
        await asyncio.sleep(0.2)
        await control.commit_invalidation(Selector(tenant="hooli"), "new", "test", 0)
        _, removed = await control.prune_rules(100)
        assert removed == 2
        assert [r.selector.tenant for r in await control.rules_after(0)] == ["hooli"]
    finally:
        await control.close()
    live, dead = key("live", tenant="globex"), key("dead", tenant="acme")
    async with sidecar(store.url, hot_max_entries="0") as a:
        await a.fill(live, b"still true")
        await a.fill(dead, b"about to be invalidated")
        assert (await a.invalidate(tenant="acme")).record.epoch == 4
        async with sidecar(store.url, hot_max_entries="0") as b:
            assert (await b.client.lookup(live)).outcome == pb.LOOKUP_OUTCOME_HIT
            assert (await b.client.lookup(dead)).outcome == pb.LOOKUP_OUTCOME_MISS
            assert b.running.freshness.distrust is None
            assert b.running.freshness.trust.distrusted == 0
            assert {r.selector.tenant for r in b.running.freshness.rules.rules()} == {
                "hooli",
                "acme",
            }
        if where == "cluster":
            raw = _raw(store)
            _delete_chain(raw)
            raw.close()
            async with sidecar(store.url, hot_max_entries="0") as c:
                await _refused(c, live, "missing")


async def test_after_redis_lost_its_data_the_rules_come_back_signed_without_alarm(
    own_redis: RedisServer,
) -> None:
    """Redis restarted empty under a sidecar holding a rule; the saved genuine entry it
    killed is put back. The sidecar re-publishes its rule into the new data set's chain
    (the counter above it, a gap the chain allows); a sidecar started afterwards
    verifies that chain without alarm, misses the killed entry and hits a new one."""
    dead = key("refund window", tenant="acme")
    async with sidecar(own_redis.url, hot_max_entries="0") as a:
        await a.fill(dead, b"30 days (old policy)")
        raw = redis.Redis.from_url(own_redis.url)
        [entry_key] = raw.keys("ic:v2:r:*")
        genuine = raw.get(entry_key)
        raw.close()
        for tenant in ("initech", "acme"):
            await a.invalidate(tenant=tenant)
        own_redis.kill()
        own_redis.start()
        await a.running.freshness.refresh()  # what its refresh loop does within bound/3
        assert a.running.freshness.distrust is None
        raw = redis.Redis.from_url(own_redis.url)
        assert raw.zcard(RULES) == 2, "re-published"
        raw.set(entry_key, genuine)  # type: ignore[arg-type]
        raw.close()
        async with sidecar(own_redis.url, hot_max_entries="0") as b:
            assert (await b.client.lookup(dead)).outcome == pb.LOOKUP_OUTCOME_MISS
            live = key("new entry", tenant="globex")
            await b.fill(live, b"fresh")
            assert (await b.client.lookup(live)).outcome == pb.LOOKUP_OUTCOME_HIT
            assert b.running.freshness.trust.distrusted == 0
            assert (await b.invalidate(tenant="hooli")).record.epoch >= 3


async def test_a_forged_or_altered_audit_record_is_not_listed(redis_server: RedisServer) -> None:
    """The audit log lists only records whose tag verifies: a record the attacker added,
    and a genuine one whose reason it rewrote, are left out and counted; the others are
    listed as committed."""
    async with sidecar(redis_server.url) as a:
        await a.invalidate(tenant="acme", reason="first")
        await a.invalidate(tenant="initech", reason="second")
        raw = redis.Redis.from_url(redis_server.url)
        rows = cast(list[tuple[bytes, dict[bytes, bytes]]], raw.xrange(META + "audit"))
        first_id, fields = rows[0]
        raw.xdel(META + "audit", first_id)
        raw.xadd(META + "audit", fields | {b"reason": b"nothing to see here"})  # type: ignore[arg-type]
        raw.xadd(META + "audit", fields | {b"caller": b"deployer", b"tag": b"00" * 32})  # type: ignore[arg-type]
        raw.close()
        records = await a.audit()
        assert [r.reason for r in records] == ["second"]
        assert a.running.stores.control.rejected_audit == 2  # type: ignore[attr-defined]
