"""Bounded waiting on keys another caller holds: one watch per awaited key, not one
polling loop per waiter.

Every Lookup with wait_ms that finds a key held elsewhere parks a future on the key's
group. One watch task per group looks again when woken (a local store or release of
that key) or after a short pause (a result stored or a hold dropped by another pod):
a HIT answers every waiter that can use it at once (one young enough for its max age,
in a form its caller can answer from: see `accepts`); a hold it wins goes to the
longest waiter still waiting, who computes the key. So a waiter that cannot use the
entry already there (a refresh for max age, a form its caller cannot serve) waits for
the one computation instead of starting its own. A waiter's own deadline is a timer on
its future, so it answers on time however slow the watch's reads are. The number of
waiters is capped (all keys together): past the cap a Lookup is refused instead of
parked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from sidecar.errors import ResourceExhausted
from sidecar.keys import KeyDigest
from sidecar.results.lease_tokens import Lease
from sidecar.results.types import LookupQuery, LookupResult, Outcome

log = structlog.get_logger("infercache.cache")

# The watch's pause between looks: short at first (a local holder stores soon), then
# capped so a key held by another pod is seen within 50 ms of its store.
FIRST_PAUSE_S = 0.005
LONGEST_PAUSE_S = 0.05


@dataclass(frozen=True, slots=True)
class Handover:
    """The hold the watch won for a waiter: it now computes the key."""

    lease: Lease
    token: bytes


Answer = LookupResult | Handover
"""What a waiter is woken with: the holder's result (a HIT) or the hold itself."""

Find = Callable[[LookupQuery], Awaitable[LookupResult]]
"""Hot then warm, without leases: one look at the awaited key."""

TryHold = Callable[[LookupQuery], Awaitable[Handover | None]]
"""Take the query's key's hold with a fresh lease, or None if someone holds it."""

Release = Callable[[Lease], Awaitable[None]]
"""Give a hold back (nobody is left to compute it)."""


@dataclass(slots=True, eq=False)
class _Group:
    """The waiters on one key, in arrival order, and the event that wakes their watch."""

    query: LookupQuery
    waiters: dict[asyncio.Future[Answer], LookupQuery] = field(default_factory=dict)
    """Each waiter's own query (its max age and what it accepts)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def answer_all(self, found: LookupResult) -> bool:
        """Answer every waiter that can use `found`; True when none is left waiting."""
        left = False
        for fut, q in self.waiters.items():
            if not fut.done():
                if accepts(q, found):
                    fut.set_result(found)
                else:
                    left = True
        return not left

    def hand_over(self, handover: Handover) -> bool:
        """Give the hold to the longest waiter still waiting; False if there is none."""
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(handover)
                return True
        return False


class KeyWaiters:
    """Parks Lookups on held keys; at most `cap` at once over all keys."""

    def __init__(
        self, cap: int, find: Find, recheck: Find, try_hold: TryHold, release: Release
    ) -> None:
        """`recheck`: the look after a hold is won (the warm tier alone: a hot tier may
        still hold the entry the holder just replaced)."""
        self.cap = cap
        self._find = find
        self._recheck = recheck
        self._try_hold = try_hold
        self._release = release
        self._groups: dict[KeyDigest, _Group] = {}
        self._count = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> int:
        """Lookups parked now, over all keys."""
        return self._count

    def notify(self, digest: KeyDigest) -> None:
        """A result for `digest` was stored here or its hold released: look again now."""
        group = self._groups.get(digest)
        if group is not None:
            group.wake.set()

    async def wait(self, q: LookupQuery, wait_s: float) -> Answer | None:
        """Wait up to `wait_s` for the key's result or its hold; None when time runs out.

        ResourceExhausted when `cap` Lookups are waiting already.
        """
        if self._count >= self.cap:
            raise ResourceExhausted(
                f"{self._count} Lookups are waiting on held keys already; the limit is "
                f"{self.cap} (INFERCACHE_LEASE_MAX_WAITERS)"
            )
        digest = q.key.digest
        group = self._groups.get(digest)
        if group is None:
            # The watch looks with no age limit and accepts any form; each waiter judges
            # what it found itself.
            group = self._groups[digest] = _Group(q._replace(max_age_s=0, wait_ms=0, accept=None))
            self._spawn(self._watch(digest, group))
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        group.waiters[fut] = q
        self._count += 1
        try:
            async with asyncio.timeout(wait_s):
                return await fut
        except TimeoutError:
            # Answered just as the timer fired: the answer (maybe a hold) still counts.
            if fut.done() and not fut.cancelled():
                return fut.result()
            return None
        finally:
            self._count -= 1
            del group.waiters[fut]
            if fut.done() and not fut.cancelled():
                answer = fut.result()
                if isinstance(answer, Handover) and _cancelled():
                    # The caller left with the hold: give it back for the others.
                    self._spawn(self._release(answer.lease))
            if not group.waiters and self._groups.get(digest) is group:
                del self._groups[digest]
                group.closed = True
                group.wake.set()

    async def _watch(self, digest: KeyDigest, group: _Group) -> None:
        try:
            await self._watch_until_answered(digest, group)
        finally:
            # Lookups arriving from now on start a new group (and watch): this one's
            # waiters were answered, or have all left.
            group.closed = True
            if self._groups.get(digest) is group:
                del self._groups[digest]

    async def _watch_until_answered(self, digest: KeyDigest, group: _Group) -> None:
        pause = FIRST_PAUSE_S
        while not group.closed:
            woken = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await group.wake.wait()
                    woken = True
            group.wake.clear()
            pause = FIRST_PAUSE_S if woken else min(pause * 1.5, LONGEST_PAUSE_S)
            if group.closed:
                return
            try:
                if await self._look(group):
                    return
            except Exception as exc:  # the watch must outlive one bad look
                log.warning("lease_watch_failed", error=f"{type(exc).__name__}: {exc}")

    async def _look(self, group: _Group) -> bool:
        """One look: True when every waiter was answered (the watch ends)."""
        found = await self._find(group.query)
        if found.outcome is Outcome.HIT and group.answer_all(found):
            return True
        # Nothing there yet, or nothing some waiters can use: the hold decides who
        # computes it.
        handover = await self._try_hold(group.query)
        if handover is None:
            return False
        # A holder stores before it releases: a result written between our read and
        # our hold is visible now (in the warm tier), and nobody needs to compute it again.
        found = await self._recheck(group.query)
        if found.outcome is Outcome.HIT and group.answer_all(found):
            await self._release(handover.lease)
            return True
        if not group.hand_over(handover):
            await self._release(handover.lease)
            return True
        return False

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def accepts(q: LookupQuery, found: LookupResult) -> bool:
    """Can the caller of `q` use the HIT `found` (its max age, its `accept`)?"""
    if q.max_age_s and found.age_ms > q.max_age_s * 1000:
        return False
    return q.accept is None or found.entry is None or q.accept(found.entry)


def _cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
