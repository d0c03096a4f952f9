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
An invalidation is one Lua script (epoch, rule, audit record, PUBLISH; SPUBLISH on
a cluster, on a channel in the same slot), so it is all-or-nothing. Time comes from
Redis's clock so that members' liveness deadlines are compared on one clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import cast

import structlog

from sidecar.backends.redis import control_scripts as scripts
from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.client import RedisGuard, RedisKeys, parse_epoch
from sidecar.config import DEFAULTS
from sidecar.errors import TierUnavailable
from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, StoreState
from sidecar.keys import KeyDigest

log = structlog.get_logger("infercache.control")

_AUDIT_MAXLEN = 100_000


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
        client: RedisBackend | None = None,
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
        self._commit = self.client.register_script(scripts.COMMIT)
        self._heartbeat = self.client.register_script(scripts.HEARTBEAT)
        self._unconfirmed = self.client.register_script(scripts.UNCONFIRMED)
        self._prune = self.client.register_script(scripts.PRUNE)
        self._state = self.client.register_script(scripts.STATE)
        self._republish = self.client.register_script(scripts.REPUBLISH)
        self._release = self.client.register_script(scripts.RELEASE)
        self._lock = self.client.register_script(scripts.LOCK)
        self._url = url
        self.foreign_rules = 0
        """Members of the rules sorted set that are not rules (skipped when read)."""

    def _k(self, name: str) -> str:
        return self.keys.meta(name)

    async def current_epoch(self) -> int:
        """GET epoch."""
        async with self._guard(self._timeout):
            value = await self.client.redis.get(self._k("epoch"))
        return parse_epoch(value)

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
                    self.keys.channel(self.client.cluster),
                    _AUDIT_MAXLEN,
                    self.client.publish_command,
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
        return StoreState(
            dataset.decode(), run.decode(), parse_epoch(epoch), int(settling), int(now)
        )

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
            # The probe is a {meta} key: on a cluster, the primary that took the commit.
            local, remote = await self.client.wait_replicas(
                self._k("durable-probe"), replicas, local_aof, timeout_ms
            )
        if local_aof:
            if local < 1 or remote < replicas:
                raise TierUnavailable(
                    f"redis control store: the rule reached the AOF of {local} of 1 primary "
                    f"and {remote} of {replicas} replica(s) within {timeout_ms} ms"
                )
        elif remote < replicas:
            raise TierUnavailable(
                f"redis control store: {remote} of {replicas} replica(s) acknowledged "
                f"the rule within {timeout_ms} ms"
            )

    async def rules_after(self, epoch: int) -> list[Rule]:
        """ZRANGEBYSCORE (epoch, +inf]."""
        async with self._guard(self._timeout):
            members = cast(
                list[bytes],
                await self.client.redis.zrangebyscore(self._k("rules"), f"({epoch}", "+inf"),
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
                await self.client.redis.xrevrange(self._k("audit"), top, "-", count=limit + 1),
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
            pipe = self.client.redis.pipeline(transaction=True)  # both keys in {meta}
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
            ok = await self.client.redis.set(self.keys.holder(digest), lease_id, nx=True, px=ttl_ms)
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
            await self.client.redis.set(self._k("secret"), proposed, nx=True)
            secret = cast(bytes | None, await self.client.redis.get(self._k("secret")))
        if not secret:
            raise TierUnavailable("redis control store: lease secret vanished")
        return secret

    async def notifications(self) -> AsyncIterator[int]:
        """Subscribe to the invalidation channel; ends (to be restarted) on any error."""
        async for data in self.client.messages(self.keys.channel(self.client.cluster)):
            yield int(data)

    async def close(self) -> None:
        """Close the connections if this store created them."""
        if self._owns_client:
            await self.client.aclose()
