"""ReadCoalescer: concurrent reads share fetches; order, errors, deadlines, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sidecar.errors import TierTimeout, TierUnavailable
from sidecar.tiers.coalesce import ReadCoalescer


class FakeStore:
    """fetch(keys, timeout) answering key * 10 and a shared counter; records every call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[list[int]] = []
        self.timeouts: list[float] = []
        self.delay_s = delay_s
        self.fail: Exception | None = None
        self.release: asyncio.Event | None = None

    async def fetch(self, keys: list[int], timeout_s: float) -> tuple[Sequence[int], int]:
        self.calls.append(list(keys))
        self.timeouts.append(timeout_s)
        await asyncio.sleep(0)  # a real fetch always waits for its answer
        if self.release is not None:
            await self.release.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return [k * 10 for k in keys], len(self.calls)


def coalescer(
    store: FakeStore, deadline_s: float = 1.0, max_keys: int = 1024
) -> ReadCoalescer[int, int, int]:
    return ReadCoalescer(store.fetch, deadline_s=deadline_s, max_keys=max_keys)


async def test_a_lone_caller_fetches_at_once_and_the_callers_behind_it_share_one_fetch() -> None:
    """Three concurrent callers: the first finds the coalescer idle and fetches alone; the
    two that came while it was in flight share one fetch, in arrival order; each gets its
    own slice and its fetch's shared result."""
    store = FakeStore()
    reads = coalescer(store)
    got = await asyncio.gather(reads.get([1, 2]), reads.get([]), reads.get([3, 1, 3]))
    assert list(got) == [([10, 20], 1), ([], 2), ([30, 10, 30], 2)]
    assert store.calls == [[1, 2], [3, 1, 3]]
    assert reads.fetches == 2


async def test_a_lone_fetch_runs_in_the_callers_own_task() -> None:
    """No task of its own: the fetch sees the caller's task (nothing to start, nothing
    to hand over)."""
    seen: list[asyncio.Task[object] | None] = []

    async def fetch(keys: list[int], timeout_s: float) -> tuple[Sequence[int], int]:
        seen.append(asyncio.current_task())
        return keys, 0

    reads: ReadCoalescer[int, int, int] = ReadCoalescer(fetch, deadline_s=1.0)
    caller = asyncio.create_task(reads.get([7]))
    assert await caller == ([7], 0)
    assert seen == [caller]


async def test_cancelling_a_lone_fetch_still_serves_the_callers_queued_behind_it() -> None:
    """The lone caller goes away mid-fetch: its fetch ends with it, and the callers that
    queued behind it are fetched next (never left waiting)."""
    store = FakeStore()
    store.release = asyncio.Event()
    reads = coalescer(store)
    first = asyncio.create_task(reads.get([1]))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(reads.get([k])) for k in (2, 3)]
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    store.release.set()
    assert [await t for t in queued] == [([20], 2), ([30], 2)]
    assert store.calls == [[1], [2, 3]]


async def test_a_lone_caller_with_no_keys_still_gets_the_shared_result() -> None:
    """An empty read is still a fetch (it carries the shared result, e.g. the epoch)."""
    store = FakeStore()
    assert await coalescer(store).get([]) == ([], 1)
    assert store.calls == [[]]


async def test_callers_arriving_during_a_fetch_share_the_next_one() -> None:
    """While one fetch is in flight, newcomers queue and are read together afterwards."""
    store = FakeStore()
    store.release = asyncio.Event()
    reads = coalescer(store)
    first = asyncio.create_task(reads.get([1]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert store.calls == [[1]]
    later = [asyncio.create_task(reads.get([k])) for k in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert store.calls == [[1]], "a caller must never join a read already in flight"
    store.release.set()
    assert await first == ([10], 1)
    assert [await t for t in later] == [([20], 2), ([30], 2), ([40], 2)]
    assert store.calls == [[1], [2, 3, 4]]


async def test_fetches_are_capped_at_max_keys_but_a_big_caller_goes_alone() -> None:
    """max_keys splits the queue between callers; one caller's keys are never split."""
    store = FakeStore()
    reads = coalescer(store, max_keys=4)
    got = await asyncio.gather(
        reads.get([0]),  # fetches alone; the rest queue behind it
        reads.get([1, 2]),
        reads.get([3, 4]),
        reads.get([5]),
        reads.get([6, 7, 8, 9, 10]),
    )
    assert [values for values, _ in got] == [[0], [10, 20], [30, 40], [50], [60, 70, 80, 90, 100]]
    assert store.calls == [[0], [1, 2, 3, 4], [5], [6, 7, 8, 9, 10]]


async def test_a_fetch_error_reaches_every_waiter_of_that_fetch_only() -> None:
    """The failing fetch's callers all get its error; the next fetch is unaffected."""
    store = FakeStore()
    store.fail = TierUnavailable("boom")
    reads = coalescer(store)
    got = await asyncio.gather(reads.get([1]), reads.get([2]), return_exceptions=True)
    assert all(isinstance(e, TierUnavailable) and str(e) == "boom" for e in got)
    assert store.calls == [[1], [2]]  # one alone, one queued behind it: both failed
    store.fail = None
    assert await reads.get([3]) == ([30], 3)


async def test_a_short_answer_fails_every_waiter() -> None:
    """A fetch returning the wrong number of values is an error, never a misaligned answer."""

    async def short(keys: list[int], timeout_s: float) -> tuple[Sequence[int], int]:
        return [k for k in keys[1:]], 0

    reads: ReadCoalescer[int, int, int] = ReadCoalescer(short, deadline_s=1.0)
    got = await asyncio.gather(reads.get([1]), reads.get([2]), return_exceptions=True)
    assert all(isinstance(e, TierUnavailable) for e in got)


async def test_a_caller_never_waits_past_its_deadline() -> None:
    """A stalled fetch: every caller gets TierTimeout within its deadline from its own call."""
    # Measured on the loop's clock; the margin past each deadline (0.1 s) is for a loaded
    # machine's late timers: a caller left waiting on the stalled fetch would never end.
    loop = asyncio.get_running_loop()
    store = FakeStore()
    store.release = asyncio.Event()  # never set until the end: every fetch hangs
    reads = coalescer(store, deadline_s=0.2)
    started = loop.time()  # the first caller's deadline is at least 0.2 s past this
    first = asyncio.create_task(reads.get([1]))
    first_done: list[float] = []
    first.add_done_callback(lambda _: first_done.append(loop.time()))
    await asyncio.sleep(0.05)
    second_started = loop.time()  # the second caller's deadline: this plus 0.2 s
    with pytest.raises(TierTimeout):
        await reads.get([2])  # queued behind the stalled fetch
    assert loop.time() - second_started < 0.2 + 0.1
    with pytest.raises(TierTimeout):
        await first
    assert first_done[0] - started < 0.2 + 0.1
    # The first caller's fetch (alone) got the whole deadline; cut off at its end (no
    # sooner than started + 0.2), it let the queued caller's fetch start, given only the
    # time that caller had left: at most second_started + 0.2 - (started + 0.2).
    assert store.calls == [[1], [2]]
    assert store.timeouts[0] == 0.2
    assert second_started - started >= 0.05
    assert 0 < store.timeouts[1] <= second_started - started + 1e-3
    assert store.timeouts[1] < 0.2
    store.release.set()
    await asyncio.sleep(0.01)
    assert store.calls == [[1], [2]], "a timed-out caller's keys are never fetched again"


async def test_a_bounded_fetch_alone_gets_no_second_timer_and_its_timeout_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`bounded`: the fetch keeps its own wall-clock deadline (a Redis guard), so a lone
    caller's fetch is not wrapped in the coalescer's; its TierTimeout is the caller's,
    within the deadline; an unbounded coalescer still arms its safety net."""
    armed: list[float | None] = []
    real_timeout = asyncio.timeout

    def counting_timeout(delay: float | None) -> asyncio.Timeout:
        armed.append(delay)
        return real_timeout(delay)

    monkeypatch.setattr(asyncio, "timeout", counting_timeout)

    given: list[float] = []

    async def fetch(keys: list[int], timeout_s: float) -> tuple[Sequence[int], int]:
        given.append(timeout_s)
        try:
            async with real_timeout(timeout_s):
                await asyncio.Event().wait()  # a Redis that never answers
        except TimeoutError:
            raise TierTimeout("the fetch's own deadline") from None
        return keys, 0

    bounded: ReadCoalescer[int, int, int] = ReadCoalescer(fetch, deadline_s=0.05, bounded=True)
    with pytest.raises(TierTimeout, match="the fetch's own deadline"):
        await bounded.get([1])
    # Within the deadline because the fetch's own timer, the one that fired, was given the
    # caller's whole deadline and no more (checked exactly, not by a wall clock that a
    # loaded machine makes late).
    assert given == [0.05]
    assert armed == []
    unbounded: ReadCoalescer[int, int, int] = ReadCoalescer(fetch, deadline_s=0.05)
    with pytest.raises(TierTimeout):
        await unbounded.get([1])
    assert len(armed) == 1


async def test_a_fetch_deadline_is_the_time_left_to_its_latest_waiter() -> None:
    """Queued callers whose deadline is near make the next fetch's timeout short."""
    # Timed against the loop's own clock around a held fetch, so a slow machine (late
    # timers, long steps) can only make the bound easier to check, never flaky.
    loop = asyncio.get_running_loop()
    store = FakeStore()
    store.release = asyncio.Event()
    reads = coalescer(store, deadline_s=0.5)
    first = asyncio.create_task(reads.get([1]))
    await asyncio.sleep(0)
    second = asyncio.create_task(reads.get([2]))
    await asyncio.sleep(0)
    queued_by = loop.time()  # the second caller's deadline was set at or before this
    await asyncio.sleep(0.03)
    released_at = loop.time()  # its fetch cannot start before this
    store.release.set()
    assert (await first)[0] == [10]
    assert (await second)[0] == [20]
    assert store.calls == [[1], [2]]
    assert store.timeouts[0] == pytest.approx(0.5, abs=1e-9)
    waited = released_at - queued_by
    assert waited >= 0.03
    assert store.timeouts[1] <= 0.5 - waited + 1e-6


async def test_cancelling_one_waiter_leaves_the_others_answered() -> None:
    """A cancelled caller does not cancel the shared fetch; the others get their values."""
    store = FakeStore()
    store.release = asyncio.Event()
    reads = coalescer(store)
    tasks = [asyncio.create_task(reads.get([k])) for k in (1, 2, 3)]
    await asyncio.sleep(0.01)
    tasks[1].cancel()
    await asyncio.sleep(0)
    store.release.set()
    assert await tasks[0] == ([10], 1)
    assert await tasks[2] == ([30], 2)
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert store.calls == [[1], [3]]


async def test_a_caller_cancelled_while_queued_is_not_fetched() -> None:
    """Cancelled before its fetch starts: its keys are left out of that fetch."""
    store = FakeStore()
    store.release = asyncio.Event()
    reads = coalescer(store)
    first = asyncio.create_task(reads.get([1]))
    await asyncio.sleep(0.01)
    queued = [asyncio.create_task(reads.get([k])) for k in (2, 3)]
    await asyncio.sleep(0)
    queued[0].cancel()
    store.release.set()
    assert await first == ([10], 1)
    assert await queued[1] == ([30], 2)
    assert store.calls == [[1], [3]]


async def test_cancelling_the_fetch_task_fails_its_waiters_with_tier_unavailable() -> None:
    """If the flusher itself is cancelled (shutdown), waiters get TierUnavailable, not hangs."""
    calls: list[list[int]] = []
    gate = asyncio.Event()

    async def fetch(keys: list[int], timeout_s: float) -> tuple[Sequence[int], int]:
        calls.append(list(keys))
        if len(calls) == 1:
            await asyncio.sleep(0.005)  # long enough for the others to queue behind it
        else:
            await gate.wait()  # the shared fetch hangs
        return [k * 10 for k in keys], len(calls)

    reads: ReadCoalescer[int, int, int] = ReadCoalescer(fetch, deadline_s=1.0)
    first = asyncio.create_task(reads.get([0]))  # alone, in its own task
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(reads.get([k])) for k in (1, 2)]
    await asyncio.sleep(0)
    assert calls == [[0]]
    assert await first == ([0], 1)
    await asyncio.sleep(0.01)
    assert calls == [[0], [1, 2]]
    flusher = reads._flusher
    assert flusher is not None
    flusher.cancel()
    got = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(e, TierUnavailable) for e in got)
    # A new caller fetches again (alone: nothing is in flight any more).
    gate.set()
    assert await reads.get([5]) == ([50], 3)


def test_bad_settings_are_refused() -> None:
    store = FakeStore()
    with pytest.raises(ValueError, match="deadline_s"):
        ReadCoalescer(store.fetch, deadline_s=0)
    with pytest.raises(ValueError, match="max_keys"):
        ReadCoalescer(store.fetch, deadline_s=1, max_keys=0)
