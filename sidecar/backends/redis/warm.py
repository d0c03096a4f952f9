"""The Redis warm tier: shared by every sidecar of a fleet, batched with MGET and pipelines.

On one Redis a read is one MGET of the epoch key and the entry keys (atomic), and a
lookup's read with its single-flight hold is one script (warm_scripts.py), as is a
store's write with its release. On a cluster the keys live in many slots: the read is
one pipeline of per-slot MGETs per primary, the primaries in parallel, the epoch read
among them. The epoch read is not atomic with the entries there, and need not be: an
Invalidate answers OK only after every live sidecar confirmed its epoch, so a read that
starts after the OK either reads the new epoch or runs on a sidecar that already applied
the rule; a read that overlaps the Invalidate may be ordered before it.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from sidecar import entries
from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.client import RedisGuard, RedisKeys, parse_epoch
from sidecar.backends.redis.holding import RedisHolding
from sidecar.backends.redis.single import SingleRedis
from sidecar.config import DEFAULTS
from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from sidecar.tiers.coalesce import ReadCoalescer

log = structlog.get_logger("infercache.warm")

# Enough of an entry to read its header and key material (see entries.peek).
PEEK_BYTES = 4096
# Most entry keys one coalesced read asks for (a single larger batch still goes alone).
MAX_COALESCED_KEYS = 1024


class RedisWarmTier:
    """WarmTier on one Redis (or a Redis-compatible proxy) or a Redis Cluster."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULTS.redis.key_prefix,
        read_timeout_s: float = DEFAULTS.redis.lookup_timeout_ms / 1000,
        write_timeout_s: float = DEFAULTS.redis.write_timeout_ms / 1000,
        client: RedisBackend | None = None,
    ) -> None:
        self.keys = RedisKeys(key_prefix)
        self._read_timeout = read_timeout_s
        self._write_timeout = write_timeout_s
        self._owns_client = client is None
        self.client = client or connect(
            url,
            connect_timeout_s=max(read_timeout_s, 0.05),
            socket_timeout_s=write_timeout_s,
        )
        # One circuit per kind of call, each judged by its own deadline: a read that
        # overruns the short read deadline must not fail the next Store untried.
        self._read_guard = RedisGuard("redis warm tier reads")
        self._write_guard = RedisGuard("redis warm tier writes")
        self._scan_guard = RedisGuard("redis warm tier scans", patient=True)
        self.foreign_keys = 0
        """Keys under the entry prefix that are not this tier's entries (skipped by scans)."""
        self._epoch_key = self.keys.meta("epoch").encode()
        self._reader = self.client.reader()
        self._reads: ReadCoalescer[bytes, bytes | None, int] = ReadCoalescer(
            self._mget_with_epoch,
            deadline_s=read_timeout_s,
            max_keys=MAX_COALESCED_KEYS,
            what="redis warm tier",
            bounded=not self._read_guard.patient,  # _mget_with_epoch: all under the guard
        )
        self.holding: RedisHolding | None = None
        """This tier with its holder keys as a HoldingStore: on one Redis; None on a
        cluster, whose entry and holder keys live in different slots (no script may
        touch both). It shares this tier's circuits and deadlines."""
        if isinstance(self.client, SingleRedis):
            self.holding = RedisHolding(
                self.client,
                self.keys,
                (self._read_guard, read_timeout_s),
                (self._write_guard, write_timeout_s),
                MAX_COALESCED_KEYS,
            )

    @property
    def failures(self) -> int:
        """Calls that failed or timed out."""
        return self._read_guard.failures + self._write_guard.failures + self._scan_guard.failures

    def redis_key(self, digest: KeyDigest) -> bytes:
        """The Redis key under which a digest's entry lives."""
        return self.keys.entry(digest)

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """MGET in one round trip."""
        if not digests:
            return []
        async with self._read_guard(self._read_timeout):
            return await self.client.get_many([self.keys.entry(d) for d in digests])

    async def get_many_with_epoch(
        self, digests: Sequence[KeyDigest]
    ) -> tuple[list[bytes | None], int]:
        """Values plus the current invalidation epoch, read by the same MGET.

        Concurrent calls are coalesced (see tiers/coalesce.py): the calls that arrive
        in one event-loop iteration, or while a read is in flight, share one MGET of
        the epoch key and all their entry keys; each still waits at most the read
        deadline from its own call.
        """
        self._read_guard.check()  # fail fast while the circuit is open
        return await self._reads.get([self.keys.entry(d) for d in digests])

    async def _mget_with_epoch(
        self, keys: list[bytes], timeout_s: float
    ) -> tuple[list[bytes | None], int]:
        """One read of the epoch key followed by `keys` (one MGET on one Redis)."""
        async with self._read_guard(timeout_s):
            replies = await self._reader.get([self._epoch_key, *keys])
        if not isinstance(replies, list) or len(replies) != len(keys) + 1:
            raise TierUnavailable("redis warm tier: MGET answered an unexpected reply")
        epoch = parse_epoch(replies[0])
        del replies[0]
        return replies, epoch

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """SET PX for each item in one pipelined round trip."""
        if not items:
            return
        async with self._write_guard(self._write_timeout):
            pipe = self.client.redis.pipeline(transaction=False)
            for it in items:
                pipe.set(self.keys.entry(it.digest), it.value, px=max(it.ttl_ms, 1))
            await pipe.execute()

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """UNLINK (non-blocking delete on the Redis side)."""
        if not digests:
            return
        async with self._write_guard(self._write_timeout):
            # On a cluster redis-py splits the UNLINK per slot.
            await self.client.redis.unlink(*[self.keys.entry(d) for d in digests])

    async def scan_page(self, cursor: int, count: int) -> tuple[int, list[tuple[KeyDigest, bytes]]]:
        """One SCAN step over entry keys with each entry's header and whole key material
        (its first PEEK_BYTES, more where the material is longer); cursor 0 = done.

        Keys under the entry prefix that this tier did not write (a name that is not a
        digest, a value of another type) are skipped and counted in `foreign_keys`.
        """
        async with self._scan_guard(self._write_timeout):
            cursor, found = await self.client.scan(cursor, self.keys.entry_pattern, count)
            named = [(d, k) for k in found if (d := self.keys.digest_of(k)) is not None]
            foreign = len(found) - len(named)
            if not named:
                self._count_foreign(foreign)
                return int(cursor), []
            pipe = self.client.redis.pipeline(transaction=False)
            for _, k in named:
                pipe.getrange(k, 0, PEEK_BYTES - 1)
            # A foreign value of another type answers WRONGTYPE: skip it, keep the page.
            heads = await pipe.execute(raise_on_error=False)
            page: list[tuple[KeyDigest, bytes]] = []
            longer: list[tuple[int, bytes, int]] = []
            for (d, k), h in zip(named, heads, strict=True):
                if isinstance(h, Exception):
                    foreign += 1
                    continue
                if not h:  # expired between SCAN and GETRANGE
                    continue
                need = entries.head_size(h)
                if need is not None and need > len(h):
                    longer.append((len(page), k, need))
                page.append((d, h))
            if longer:
                # Key material past the first PEEK_BYTES: read up to its end, so that
                # reclaim and the Invalidate estimate see every entry's dimensions.
                pipe = self.client.redis.pipeline(transaction=False)
                for _, k, need in longer:
                    pipe.getrange(k, 0, need - 1)
                fuller = await pipe.execute(raise_on_error=False)
                for (i, _, _), h in zip(longer, fuller, strict=True):
                    if isinstance(h, bytes) and h:
                        page[i] = (page[i][0], h)
        self._count_foreign(foreign)
        return int(cursor), page

    def _count_foreign(self, n: int) -> None:
        if n:
            self.foreign_keys += n
            log.warning("foreign_keys_skipped", keys=n, total=self.foreign_keys)

    async def approx_entries(self) -> int:
        """DBSIZE (summed over primaries): exact when the database holds only this cache,
        an upper bound otherwise."""
        async with self._scan_guard(self._write_timeout):
            return await self.client.dbsize()

    def usage(self) -> None:
        """Unknown without a round trip (approx_entries asks Redis)."""
        return None

    async def ping(self) -> None:
        """PING within the read deadline."""
        async with self._read_guard(max(self._read_timeout, 0.2)):
            await self.client.redis.ping()

    async def close(self) -> None:
        """Close the readers, and the connections (if this tier created them)."""
        await self._reader.close()
        if self.holding is not None:
            await self.holding.close()
        if self._owns_client:
            await self.client.aclose()
