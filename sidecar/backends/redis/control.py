"""The Redis control store: epochs, rules, audit stream and membership for a fleet.

Layout (all under the `{meta}` hash tag, see RedisKeys):
    epoch     the epoch counter (always the signed head's epoch)
    rules     sorted set, score = position in the rule chain, member = a signed rule
    head      the signed head of the chain (newest rule's tag, epoch)
    anchor    the signed start of the chain (moved forward by pruning)
    audit     stream of invalidation records, each with its tag (XADD, newest read
              with XREVRANGE)
    members   sorted set, score = liveness deadline in Redis-clock ms, member = sidecar id
    acks      hash, sidecar id -> newest epoch it has applied
    secret    the deployment's lease secret (SET NX)
    dataset   signed id of this data set (set by the first sidecar that finds none or
              one it cannot verify, with an empty chain: head, anchor, no rules)
    store     hash: born = Redis-clock ms of the first heartbeat on this data (set
              again after Redis lost it), max_ttl = longest member ttl seen since,
              retention = longest rule retention any member published since,
              run = Redis run_id last seen, restarted = when a new run_id was first
              seen on data that outlived the restart
The rule chain's values are signed here (sidecar/invalidation/chain.py) and written by
compare-and-set scripts: an invalidation reads the head, signs the next rule, head and
audit record, and one Lua script writes them (epoch, rule, head, audit record, PUBLISH;
SPUBLISH on a cluster, on a channel in the same slot) only if the head, counter and
data set are still the ones it signed over, else it is tried again. Every read of the
rules verifies the whole chain (StoreDistrusted when it fails). Time comes from Redis's
clock so that members' liveness deadlines are compared on one clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import cast

import structlog

from sidecar.backends.redis import control_scripts as scripts
from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.client import RedisGuard, RedisKeys, parse_epoch
from sidecar.backends.redis.control_chain import RedisRuleChain
from sidecar.backends.redis.deadline import CAP_FACTOR
from sidecar.config import DEFAULTS
from sidecar.errors import TierUnavailable
from sidecar.invalidation.chain import ChainSeal
from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, StoreState
from sidecar.keys import KeyDigest
from sidecar.macs import LOCAL, FleetKeys

log = structlog.get_logger("infercache.control")


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
        fleet: FleetKeys = LOCAL,
    ) -> None:
        """`fleet`: the keys that sign and verify the rule chain and audit records (every
        sidecar sharing the store must hold the same fleet secret)."""
        self.keys = RedisKeys(key_prefix)
        self._timeout = timeout_s
        # Holder keys are touched on the lookup path: same short deadline as reads.
        self._lookup_timeout = lookup_timeout_s
        self._owns_client = client is None
        # redis-py's own timeouts are only a net: the patient guard decides (it may
        # wait up to CAP_FACTOR deadlines on a busy host, see deadline.py).
        net_s = timeout_s * CAP_FACTOR
        self.client = client or connect(url, connect_timeout_s=net_s, socket_timeout_s=net_s)
        # The control plane's deadline counts Redis's time, not the sidecar's own CPU
        # or scheduling delay: a busy host must not fail an Invalidate (deadline.py).
        self._guard = RedisGuard("redis control store", patient=True)
        # Holder keys: own circuits, so a slow take (lookup deadline) fails neither the
        # next release (write deadline) nor the next Invalidate or heartbeat.
        self._hold_guard = RedisGuard("redis holder keys (take)")
        self._release_guard = RedisGuard("redis holder keys (release)")
        self._renew_guard = RedisGuard("redis holder keys (renew)")
        self.chain = RedisRuleChain(
            self.client,
            self._k,
            self._guard,
            timeout_s,
            ChainSeal(fleet),
            self.keys.channel(self.client.cluster),
        )
        self._heartbeat = self.client.register_script(scripts.HEARTBEAT)
        self._unconfirmed = self.client.register_script(scripts.UNCONFIRMED)
        self._release = self.client.register_script(scripts.RELEASE)
        self._renew = self.client.register_script(scripts.RENEW)
        self._lock = self.client.register_script(scripts.LOCK)
        self._url = url
        self.rejected_audit = 0
        """Audit records left out of a listing because their tag did not verify."""

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
        """Sign the next rule, head and audit record over the chain's head; one script
        writes them with the epoch and PUBLISHes it, if the head is still the same."""
        return await self.chain.commit(selector, reason, caller, estimated_entries)

    async def state(self, proposed_dataset: str) -> StoreState:
        """One script: data set id (a new one, with an empty chain, if none), Redis
        run_id, epoch, settling time, head and anchor; then each verified."""
        return await self.chain.state(proposed_dataset)

    async def republish(self, rules: Sequence[Rule], epoch: int) -> int:
        """Append the rules the chain lacks, signed again; raise the epoch and head."""
        return await self.chain.republish(rules, epoch)

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
        """The whole chain, verified (StoreDistrusted otherwise); its rules above `epoch`."""
        chain, _, _ = await self.chain.read()
        return [r for r in chain.rules if r.epoch > epoch]

    async def prune_rules(self, retention_ms: int) -> tuple[int, int]:
        """Cutoff = Redis TIME - max(retention_ms, the fleet's retention); the oldest rules
        committed before it are removed and the signed anchor moved past them."""
        return await self.chain.prune(retention_ms)

    async def audit_page(self, before: str | None, limit: int) -> tuple[list[AuditRecord], str]:
        """XREVRANGE, exclusive of `before`; records whose tag fails are left out,
        counted (`rejected_audit`) and logged."""
        top = f"({before}" if before else "+"
        async with self._guard(self._timeout):
            rows = cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                await self.client.redis.xrevrange(self._k("audit"), top, "-", count=limit + 1),
            )
        records = []
        for entry_id, fields in rows[:limit]:
            record = self.chain.audit_record(entry_id, fields)
            if record is None:
                self.rejected_audit += 1
                log.warning("audit_record_rejected", id=entry_id.decode(errors="replace"))
            else:
                records.append(record)
        more = len(rows) > limit
        return records, (rows[limit - 1][0].decode() if more and limit > 0 else "")

    async def heartbeat(
        self, member_id: str, acked_epoch: int, ttl_ms: int, retention_ms: int = 0
    ) -> bool:
        """Extend liveness and raise the acknowledged epoch (never lowers it); raise the
        fleet's rule retention to retention_ms; whether the member was still live when it
        arrived. (A store that lost its epoch gets it back from Freshness's
        re-publication, with a signed head.)"""
        async with self._guard(self._timeout):
            continuous = await self._heartbeat(
                keys=[self._k("members"), self._k("acks"), self._k("store")],
                args=[member_id, acked_epoch, ttl_ms, retention_ms],
            )
        return bool(continuous == 1)

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

    async def renew_holders(
        self, holds: Sequence[tuple[KeyDigest, bytes]], ttl_ms: int
    ) -> list[bool]:
        """One compare-and-PEXPIRE script for all of them on one Redis; on a cluster one
        per hold (their keys live in different slots), sent concurrently."""
        if not holds:
            return []
        ttl = max(ttl_ms, 1)
        async with self._renew_guard(self._timeout):
            if self.client.cluster:
                replies = await asyncio.gather(
                    *(
                        self._renew(keys=[self.keys.holder(d)], args=[lease_id, ttl])
                        for d, lease_id in holds
                    )
                )
                return [r == [1] for r in replies]
            keys = [self.keys.holder(d) for d, _ in holds]
            reply = await self._renew(keys=keys, args=[*(lid for _, lid in holds), ttl])
        return [r == 1 for r in reply]

    def judge_holds_by(self, kept: Callable[[bytes], bool]) -> None:
        """Ignored: other pods see a hold's TTL in Redis, not this process's keeper."""

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
