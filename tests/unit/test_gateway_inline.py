"""A coroutine's first step run inline (sidecar/gateway/inline.py): one that never
waits ends in the caller's step; one that waits goes on under `Resumed` exactly as
under `await`: results, exceptions, values sent, cancellation and its cleanup."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.gateway.inline import first_step

pytestmark = pytest.mark.timeout(10)


async def _at_once() -> int:
    return 7


async def _fails_at_once() -> None:
    raise ValueError("no")


def test_a_coroutine_that_never_waits_ends_in_the_first_step() -> None:
    assert first_step(_at_once()) == (True, 7)
    with pytest.raises(ValueError, match="no"):
        first_step(_fails_at_once())


async def test_a_future_is_an_awaitable_too() -> None:
    fut = asyncio.get_running_loop().create_future()
    ended, rest = first_step(fut)
    assert not ended
    fut.set_result(3)
    assert await rest == 3


async def test_a_waiting_coroutine_goes_on_under_resumed() -> None:
    seen: list[str] = []

    async def waits() -> str:
        await asyncio.sleep(0)
        seen.append("after sleep 0")
        await asyncio.sleep(0.01)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, "value")
        return await fut

    ended, rest = first_step(waits())
    assert not ended
    assert await rest == "value"
    assert seen == ["after sleep 0"]


async def test_an_exception_after_a_wait_reaches_the_awaiter() -> None:
    async def fails_later() -> None:
        await asyncio.sleep(0.001)
        raise KeyError("late")

    ended, rest = first_step(fails_later())
    assert not ended
    with pytest.raises(KeyError, match="late"):
        await rest


async def test_a_cancellation_reaches_the_coroutine_and_its_cleanup_runs() -> None:
    cleaned: list[str] = []
    started = asyncio.Event()

    async def long() -> None:
        try:
            started.set()
            await asyncio.sleep(60)
        finally:
            cleaned.append("finally")

    async def runner() -> None:
        ended, rest = first_step(long())
        assert not ended
        await rest

    task = asyncio.ensure_future(runner())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"]


async def test_a_cancellation_the_coroutine_absorbs_lets_it_finish() -> None:
    async def absorbs() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return "absorbed"
        return "slept"

    async def runner() -> str:
        ended, rest = first_step(absorbs())
        assert not ended
        result: str = await rest
        return result

    task = asyncio.ensure_future(runner())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "absorbed"
