"""HoldingStore on one Redis: the scripts of warm_scripts.py, each kind of call on a
connection of its own (ConnectionReader: no pool, no per-call machinery), concurrent
calls of a kind sharing one script run (ReadCoalescer), as the warm tier's reads do.

Why its own connections and batching for the writes too: a store through redis-py's
script call cost about as much CPU as the rest of a gateway miss together (py-spy,
c=1); a packed EVALSHA on a kept connection costs a fraction of it. A script the
server does not know (a restart, SCRIPT FLUSH) is loaded and the call sent again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from sidecar.backends.redis import warm_scripts as scripts
from sidecar.backends.redis.client import RedisGuard, RedisKeys, parse_epoch
from sidecar.backends.redis.single import ConnectionReader, SingleRedis, pack_args
from sidecar.errors import TierUnavailable
from sidecar.tiers.base import HeldRead, HoldAsk, WarmItem
from sidecar.tiers.coalesce import ReadCoalescer

# Most entries one write-and-release script carries (each may be a large payload).
MAX_WRITES_PER_SCRIPT = 64

Guarded = tuple[RedisGuard, float]
"""A circuit and the deadline its calls get."""


class RedisHolding:
    """HoldingStore on one Redis (see the module docstring)."""

    def __init__(
        self,
        client: SingleRedis,
        keys: RedisKeys,
        reads: Guarded,
        writes: Guarded,
        max_asks: int,
    ) -> None:
        """`reads` and `writes`: the warm tier's circuits and deadlines, shared with it."""
        self.keys = keys
        self._redis = client.redis
        self._read_guard, read_s = reads
        self._write_guard, write_s = writes
        self._reader = ConnectionReader(client.redis)
        self._writer = ConnectionReader(client.redis)
        self._epoch_key = keys.meta("epoch").encode()
        self._holds: ReadCoalescer[HoldAsk, tuple[bytes | None, bool], int] = ReadCoalescer(
            self._get_or_hold,
            deadline_s=read_s,
            max_keys=max_asks,
            what="redis warm tier (read and hold)",
            # The guard's deadline is the wall clock's unless it is patient.
            bounded=not self._read_guard.patient,
        )
        self._puts: ReadCoalescer[tuple[WarmItem, bytes], None, None] = ReadCoalescer(
            self._put_and_release,
            deadline_s=write_s,
            max_keys=MAX_WRITES_PER_SCRIPT,
            what="redis warm tier (write and release)",
            bounded=not self._write_guard.patient,
        )

    async def get_or_hold(self, asks: Sequence[HoldAsk]) -> HeldRead:
        """HoldingStore.get_or_hold: one script (shared with concurrent calls)."""
        self._read_guard.check()  # fail fast while the circuit is open
        pairs, epoch = await self._holds.get(asks)
        return HeldRead([v for v, _ in pairs], [h for _, h in pairs], epoch)

    async def put_and_release(self, item: WarmItem, lease_id: bytes) -> None:
        """HoldingStore.put_and_release: one script (shared with concurrent calls)."""
        self._write_guard.check()
        await self._puts.get([(item, lease_id)])

    async def close(self) -> None:
        """Drop both connections."""
        await self._reader.close()
        await self._writer.close()

    async def _get_or_hold(
        self, asks: list[HoldAsk], timeout_s: float
    ) -> tuple[list[tuple[bytes | None, bool]], int]:
        keys = [self._epoch_key]
        args: list[bytes] = []
        for a in asks:
            keys += [self.keys.entry(a.digest), self.keys.holder(a.digest).encode()]
            args += [a.lease_id, b"%d" % max(a.ttl_ms, 1)]
        async with self._read_guard(timeout_s):
            reply = await self._run(self._reader, scripts.GET_OR_HOLD, keys, args)
        if not isinstance(reply, list) or len(reply) != 2 * len(asks) + 1:
            raise TierUnavailable("redis warm tier: read-and-hold answered an unexpected reply")
        epoch = parse_epoch(reply[0])
        return [(reply[i], reply[i + 1] == 1) for i in range(1, len(reply), 2)], epoch

    async def _put_and_release(
        self, writes: list[tuple[WarmItem, bytes]], timeout_s: float
    ) -> tuple[list[None], None]:
        keys: list[bytes] = []
        args: list[bytes] = []
        for item, lease_id in writes:
            keys += [self.keys.entry(item.digest), self.keys.holder(item.digest).encode()]
            args += [item.value, b"%d" % max(item.ttl_ms, 1), lease_id]
        async with self._write_guard(timeout_s):
            await self._run(self._writer, scripts.PUT_AND_RELEASE, keys, args)
        return [None] * len(writes), None

    async def _run(
        self, conn: ConnectionReader, script: str, keys: list[bytes], args: list[bytes]
    ) -> Any:
        """EVALSHA on `conn`; SCRIPT LOAD and once more if Redis does not know it."""
        packed = pack_args([b"EVALSHA", _SHAS[script], b"%d" % len(keys), *keys, *args])
        try:
            return await conn.call(packed)
        except NoScriptError:
            await self._redis.script_load(script)
            return await conn.call(packed)


def _sha1(script: str) -> bytes:
    # The name EVALSHA knows a script by (as SCRIPT LOAD answers it).
    return hashlib.sha1(script.encode()).hexdigest().encode()


# Named once, not hashed again on every lookup and store.
_SHAS = {s: _sha1(s) for s in (scripts.GET_OR_HOLD, scripts.PUT_AND_RELEASE)}
