"""The Redis control store: epochs, rules, audit stream and membership for a fleet.

Layout (all under the `{meta}` hash tag, see RedisKeys):
    epoch     INCR counter
    rules     sorted set, score = epoch, member = "epoch|time_ms|selector-json"
    audit     stream of invalidation records (XADD, newest read with XREVRANGE)
    members   sorted set, score = liveness deadline in Redis-clock ms, member = sidecar id
    acks      hash, sidecar id -> newest epoch it has applied
    secret    the deployment's lease secret (SET NX)
    dataset   id of this data set (SET NX by the first sidecar that finds none)
    store     hash: born = Redis-clock ms of the first heartbeat on this data (set
              again after Redis lost it), max_ttl = longest member ttl seen since,
              retention = longest rule retention any member published since,
              run = Redis run_id last seen, restarted = when a new run_id was first
              seen on data that outlived the restart
An invalidation is one Lua script (epoch, rule, audit record, PUBLISH), so it
is all-or-nothing. Time comes from Redis's clock so that members' liveness
deadlines are compared on one clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
import structlog

from sidecar.backends.redis.client import RedisGuard, RedisKeys, connect
from sidecar.config import DEFAULTS
from sidecar.errors import TierUnavailable
from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, StoreState
from sidecar.keys import KeyDigest

log = structlog.get_logger("infercache.control")

_AUDIT_MAXLEN = 100_000

_COMMIT = """
local e = redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], e, e .. '|' .. now .. '|' .. ARGV[1])
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*',
  'epoch', e, 'time_ms', now, 'caller', ARGV[3], 'selector', ARGV[1],
  'reason', ARGV[2], 'estimated_entries', ARGV[4])
redis.call('PUBLISH', ARGV[5], e)
return {e, now, id}
"""

_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(dead) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local acked = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > acked then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
-- A Redis that lost its data restarts the counter; entries and sidecars still hold
-- epochs of the old numbering, so new rules must be numbered above them.
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[2])
end
redis.call('HSETNX', KEYS[4], 'born', now)
if tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[4], 'max_ttl') or '0') then
  redis.call('HSET', KEYS[4], 'max_ttl', ARGV[3])
end
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[4], 'retention') or '0') then
  redis.call('HSET', KEYS[4], 'retention', ARGV[4])
end
return now
"""

# Pruning on the store's clock with the fleet's retention: a sidecar whose clock runs
# ahead, or whose TTL settings are shorter, cannot delete rules others still need.
_PRUNE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fleet = tonumber(redis.call('HGET', KEYS[2], 'retention') or '0')
local keep = math.max(tonumber(ARGV[1]), fleet)
local cutoff = now - keep
local old = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local at = tonumber(string.match(m, '^%d+|(%d+)|'))
  if at ~= nil and at < cutoff then table.insert(old, m) end
end
for i = 1, #old, 500 do
  redis.call('ZREM', KEYS[1], unpack(old, i, math.min(i + 499, #old)))
end
return {cutoff, #old}
"""

_UNCONFIRMED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local out = {}
for _, id in ipairs(live) do
  if tonumber(redis.call('HGET', KEYS[2], id) or '0') < tonumber(ARGV[1]) then
    table.insert(out, id)
  end
end
-- Members confirmed before Redis lost its data are missing from `members` but may
-- still serve hits until their ttl runs out: wait that long after the store's rebirth.
local born = tonumber(redis.call('HGET', KEYS[3], 'born') or now)
local age = now - born
local max_ttl = tonumber(redis.call('HGET', KEYS[3], 'max_ttl') or '0')
if age < max_ttl then
  table.insert(out, 'members-from-before-a-store-reset-' .. age .. 'ms-ago')
end
-- Likewise after a restart from persisted data: members live before it may not have
-- heartbeated (and re-published their rules) into the restarted store yet.
local restarted = tonumber(redis.call('HGET', KEYS[3], 'restarted') or '0')
if restarted > 0 and now - restarted < max_ttl then
  table.insert(out, 'members-from-before-a-store-restart-' .. (now - restarted) .. 'ms-ago')
end
return out
"""

# Who the store is: its data set (an id made by the first sidecar to see it empty) and
# its process (Redis's run_id). Data that outlived a restart (RDB or AOF) may lack the
# rules committed after its last persisted write; `restarted` marks when a sidecar
# first saw the new process, and for the longest member ttl after it the store is
# settling: members re-publish the rules they hold.
_STATE = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
local dataset = redis.call('GET', KEYS[1])
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = redis.call('HGET', KEYS[2], 'run')
if seen ~= run then
  redis.call('HSET', KEYS[2], 'run', run)
  if seen then redis.call('HSET', KEYS[2], 'restarted', now) end
end
local settling = 0
local restarted = tonumber(redis.call('HGET', KEYS[2], 'restarted') or '0')
if restarted > 0 then
  local ttl = tonumber(redis.call('HGET', KEYS[2], 'max_ttl') or '0')
  settling = math.max(0, restarted + ttl - now)
end
return {dataset, run, tonumber(redis.call('GET', KEYS[3]) or '0'), settling, now}
"""

_REPUBLISH = """
local added = 0
local newest = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  added = added + redis.call('ZADD', KEYS[1], 'NX', ARGV[i], ARGV[i + 1])
  newest = math.max(newest, tonumber(ARGV[i]))
end
if newest > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], newest)
end
return added
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_LOCK = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


def _parse_rule(member: bytes) -> Rule | None:
    """The rule a `rules` member holds; None for a member no sidecar wrote."""
    try:
        epoch, time_ms, selector = member.decode().split("|", 2)
        return Rule(int(epoch), Selector.from_json(selector), int(time_ms))
    except (ValueError, TypeError, AttributeError):  # JSON, UTF-8 and int errors are ValueErrors
        return None


def _parse_audit(entry_id: bytes, fields: dict[bytes, bytes]) -> AuditRecord:
    f = {k.decode(): v.decode() for k, v in fields.items()}
    return AuditRecord(
        id=entry_id.decode(),
        time_ms=int(f["time_ms"]),
        caller=f["caller"],
        selector=Selector.from_json(f["selector"]),
        reason=f["reason"],
        epoch=int(f["epoch"]),
        estimated_entries=int(f["estimated_entries"]),
    )


class RedisControlStore:
    """ControlStore on Redis; several sidecars share it."""

    name = "redis"
    shared = True

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULTS.redis.key_prefix,
        timeout_s: float = DEFAULTS.redis.write_timeout_ms / 1000,
        lookup_timeout_s: float = DEFAULTS.redis.lookup_timeout_ms / 1000,
        client: aioredis.Redis | None = None,
    ) -> None:
        self.keys = RedisKeys(key_prefix)
        self._timeout = timeout_s
        # Holder keys are touched on the lookup path: same short deadline as reads.
        self._lookup_timeout = lookup_timeout_s
        self._owns_client = client is None
        self.client = client or connect(
            url, connect_timeout_s=timeout_s, socket_timeout_s=timeout_s
        )
        self._guard = RedisGuard("redis control store")
        # Holder keys: own circuits, so a slow take (lookup deadline) fails neither the
        # next release (write deadline) nor the next Invalidate or heartbeat.
        self._hold_guard = RedisGuard("redis holder keys (take)")
        self._release_guard = RedisGuard("redis holder keys (release)")
        self._commit = self.client.register_script(_COMMIT)
        self._heartbeat = self.client.register_script(_HEARTBEAT)
        self._unconfirmed = self.client.register_script(_UNCONFIRMED)
        self._prune = self.client.register_script(_PRUNE)
        self._state = self.client.register_script(_STATE)
        self._republish = self.client.register_script(_REPUBLISH)
        self._release = self.client.register_script(_RELEASE)
        self._lock = self.client.register_script(_LOCK)
        self._url = url
        self.foreign_rules = 0
        """Members of the rules sorted set that are not rules (skipped when read)."""

    def _k(self, name: str) -> str:
        return self.keys.meta(name)

    async def current_epoch(self) -> int:
        """GET epoch."""
        async with self._guard(self._timeout):
            value = await self.client.get(self._k("epoch"))
        return int(value or 0)

    async def commit_invalidation(
        self, selector: Selector, reason: str, caller: str, estimated_entries: int
    ) -> AuditRecord:
        """One atomic script: INCR epoch, ZADD rule, XADD audit, PUBLISH."""
        async with self._guard(self._timeout):
            epoch, now, entry_id = await self._commit(
                keys=[self._k("epoch"), self._k("rules"), self._k("audit")],
                args=[
                    selector.to_json(),
                    reason,
                    caller,
                    estimated_entries,
                    self.keys.channel,
                    _AUDIT_MAXLEN,
                ],
            )
        return AuditRecord(
            id=entry_id.decode(),
            time_ms=int(now),
            caller=caller,
            selector=selector,
            reason=reason,
            epoch=int(epoch),
            estimated_entries=estimated_entries,
        )

    async def state(self, proposed_dataset: str) -> StoreState:
        """One script: data set id (SET NX), Redis run_id, epoch, settling time."""
        async with self._guard(self._timeout):
            dataset, run, epoch, settling, now = await self._state(
                keys=[self._k("dataset"), self._k("store"), self._k("epoch")],
                args=[proposed_dataset],
            )
        return StoreState(dataset.decode(), run.decode(), int(epoch), int(settling), int(now))

    async def republish(self, rules: Sequence[Rule], epoch: int) -> int:
        """ZADD NX each rule as committed (same member string), raise the epoch."""
        args: list[str | int] = [epoch]
        for r in rules:
            args += [r.epoch, r.member()]
        async with self._guard(self._timeout):
            added = await self._republish(keys=[self._k("rules"), self._k("epoch")], args=args)
        return int(added)

    async def wait_durable(self, replicas: int, local_aof: bool, timeout_ms: int) -> None:
        """WAIT (or WAITAOF) after a write on the same connection: WAIT covers the
        writes of its own connection, and this one's write comes after the commit's."""
        async with self._guard(self._timeout + timeout_ms / 1000):
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self._k("durable-probe"), "1")
            if local_aof:
                pipe.execute_command("WAITAOF", 1, replicas, timeout_ms)
            else:
                pipe.execute_command("WAIT", replicas, timeout_ms)
            acked = (await pipe.execute())[1]
        if local_aof:
            local, remote = (int(x) for x in acked)
            if local < 1 or remote < replicas:
                raise TierUnavailable(
                    f"redis control store: the rule reached the AOF of {local} of 1 primary "
                    f"and {remote} of {replicas} replica(s) within {timeout_ms} ms"
                )
        elif int(acked) < replicas:
            raise TierUnavailable(
                f"redis control store: {int(acked)} of {replicas} replica(s) acknowledged "
                f"the rule within {timeout_ms} ms"
            )

    async def rules_after(self, epoch: int) -> list[Rule]:
        """ZRANGEBYSCORE (epoch, +inf]."""
        async with self._guard(self._timeout):
            members = cast(
                list[bytes],
                await self.client.zrangebyscore(self._k("rules"), f"({epoch}", "+inf"),
            )
        rules = [r for m in members if (r := _parse_rule(m)) is not None]
        if len(rules) < len(members):
            # Someone else's member in our sorted set: skipped, never fatal to a refresh.
            self.foreign_rules += len(members) - len(rules)
            log.warning("foreign_rules_skipped", members=len(members) - len(rules))
        return rules

    async def prune_rules(self, retention_ms: int) -> tuple[int, int]:
        """One script: cutoff = Redis TIME - max(retention_ms, the fleet's retention);
        ZREM the rules committed before it."""
        async with self._guard(self._timeout):
            cutoff, removed = await self._prune(
                keys=[self._k("rules"), self._k("store")], args=[retention_ms]
            )
        return int(cutoff), int(removed)

    async def audit_page(self, before: str | None, limit: int) -> tuple[list[AuditRecord], str]:
        """XREVRANGE, exclusive of `before`."""
        top = f"({before}" if before else "+"
        async with self._guard(self._timeout):
            rows = cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                await self.client.xrevrange(self._k("audit"), top, "-", count=limit + 1),
            )
        records = [_parse_audit(i, f) for i, f in rows[:limit]]
        return records, (records[-1].id if len(rows) > limit and records else "")

    async def heartbeat(
        self, member_id: str, acked_epoch: int, ttl_ms: int, retention_ms: int = 0
    ) -> None:
        """Extend liveness and raise the acknowledged epoch (never lowers it); raise the
        store's epoch to acked_epoch if the store lost it; raise the fleet's rule
        retention to retention_ms."""
        async with self._guard(self._timeout):
            await self._heartbeat(
                keys=[self._k("members"), self._k("acks"), self._k("epoch"), self._k("store")],
                args=[member_id, acked_epoch, ttl_ms, retention_ms],
            )

    async def leave(self, member_id: str) -> None:
        """ZREM + HDEL."""
        async with self._guard(self._timeout):
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self._k("members"), member_id)
            pipe.hdel(self._k("acks"), member_id)
            await pipe.execute()

    async def unconfirmed_members(self, epoch: int) -> list[str]:
        """Live members whose acknowledged epoch is below `epoch`; while the store's data
        is younger than the longest member ttl, also a placeholder for members that may
        have been confirmed before Redis lost its data and not heartbeated since."""
        async with self._guard(self._timeout):
            ids = await self._unconfirmed(
                keys=[self._k("members"), self._k("acks"), self._k("store")], args=[epoch]
            )
        return [i.decode() for i in ids]

    async def acquire_holder(self, digest: KeyDigest, lease_id: bytes, ttl_ms: int) -> bool:
        """SET NX PX."""
        async with self._hold_guard(self._lookup_timeout):
            ok = await self.client.set(self.keys.holder(digest), lease_id, nx=True, px=ttl_ms)
        return bool(ok)

    async def release_holder(self, digest: KeyDigest, lease_id: bytes) -> None:
        """Compare-and-delete."""
        async with self._release_guard(self._timeout):
            await self._release(keys=[self.keys.holder(digest)], args=[lease_id])

    async def try_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend."""
        async with self._guard(self._timeout):
            ok = await self._lock(keys=[self._k(f"lock:{name}")], args=[owner, ttl_ms])
        return bool(ok)

    async def shared_secret(self, proposed: bytes) -> bytes:
        """SET NX, then GET what won."""
        async with self._guard(self._timeout):
            await self.client.set(self._k("secret"), proposed, nx=True)
            secret = cast(bytes | None, await self.client.get(self._k("secret")))
        if not secret:
            raise TierUnavailable("redis control store: lease secret vanished")
        return secret

    async def notifications(self) -> AsyncIterator[int]:
        """Subscribe to the invalidation channel; ends (to be restarted) on any error."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.keys.channel)
            while True:
                msg = await pubsub.get_message(timeout=1.0)
                if msg is not None and msg.get("type") == "message":
                    yield int(msg["data"])
        finally:
            try:
                await cast(Any, pubsub).aclose()
            except Exception:  # closing a broken connection may fail; nothing to do
                log.debug("pubsub_close_failed")

    async def close(self) -> None:
        """Close the pool if this store created it."""
        if self._owns_client:
            await self.client.aclose()
