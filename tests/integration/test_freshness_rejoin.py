"""A member whose refresh stalls past its bound between reading the store and its
heartbeat (a stopped process: the heartbeat lands only after the thaw) has lapsed:
commits made meanwhile did not wait for it, and the rules it read before the stall may
predate them. That round must not confirm it (before: it did, and a thawed sidecar
served a hot entry the fleet had just invalidated; seen once in CI as
test_frozen_sidecar_delays_invalidate_until_its_membership_lapses). Real Redis."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any, cast

import pytest

from sidecar.backends.redis.control import RedisControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet, Selector
from sidecar.invalidation.store import ControlStore
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis

BOUND_S = 1.0
_PREFIXES = itertools.count()


class StalledHeartbeat:
    """The store, with heartbeats that wait at `gate` once armed (the process stopped
    between its read of the store and its heartbeat)."""

    def __init__(self, store: RedisControlStore) -> None:
        self._store = store
        self.armed = False
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def heartbeat(self, *args: Any, **kwargs: Any) -> bool:
        if self.armed:
            self.armed = False
            self.reached.set()
            await self.gate.wait()
        return await self._store.heartbeat(*args, **kwargs)


async def test_a_member_that_lapsed_mid_refresh_is_not_confirmed_by_rules_read_before(
    redis_server: RedisServer,
) -> None:
    prefix = f"rejoin{os.getpid()}-{next(_PREFIXES)}:"
    a_store = RedisControlStore(redis_server.url, key_prefix=prefix, timeout_s=5.0)
    b_store = RedisControlStore(redis_server.url, key_prefix=prefix, timeout_s=5.0)
    stalled = StalledHeartbeat(a_store)
    a = Freshness(cast(ControlStore, stalled), RuleSet(), bound_s=BOUND_S, member_id="a")
    b = Freshness(b_store, RuleSet(), bound_s=BOUND_S, member_id="b")
    try:
        await a.refresh()
        await b.refresh()
        assert a.confirmed()
        # The next round starts half a bound later (as the refresh loop's would), reads
        # the store, and stalls before its heartbeat until the store lets `a` lapse (its
        # last heartbeat's deadline), well within a bound of the round's own start.
        await asyncio.sleep(BOUND_S / 2)
        stalled.armed = True
        refresh = asyncio.create_task(a.refresh())
        await stalled.reached.wait()
        for _ in range(500):  # 5 s at most
            if "a" not in await b_store.unconfirmed_members(2**40):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("a never lapsed in the store")
        record = await b_store.commit_invalidation(Selector(tenant="acme"), "r", "test", 0)
        assert "a" not in await b_store.unconfirmed_members(record.epoch), "a is not waited for"
        stalled.gate.set()  # the thaw: the heartbeat lands
        await refresh
        assert not (a.confirmed() and a.rules.epoch < record.epoch), (
            f"confirmed at epoch {a.rules.epoch} while {record.epoch} was committed"
        )
        assert a.confirmed(), "a second round read the commit and confirmed"
        assert a.rules.epoch >= record.epoch
    finally:
        await a_store.close()
        await b_store.close()
