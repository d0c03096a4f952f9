"""The control plane's patient deadline (backends/redis/deadline.py): Redis's time is
what counts, not the time the sidecar's own thread ran other work, waited for a CPU or
did not run at all; a silent Redis still fails at the deadline, and the cap always ends
a call. Real sockets, real event loops (asyncio's and uvloop's): the order in which a
loop reads a waiting reply and runs a due timer is the point."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import uvloop

from sidecar.backends.redis.client import RedisGuard
from sidecar.backends.redis.deadline import LOOK_S, PatientDeadline, own_time_s
from sidecar.errors import TierTimeout

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def run(loop: str, main: Callable[[], Awaitable[None]]) -> None:
    """Run `main` on a fresh loop of that kind."""

    async def wrapped() -> None:
        await main()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(wrapped())


def busy(seconds: float) -> None:
    """Hold the loop's thread on the CPU (the sidecar busy with other work)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@asynccontextmanager
async def replier(after_s: float | None) -> AsyncIterator[asyncio.StreamReader]:
    """A reader on a real socket whose peer (a thread) answers `after_s` from now, or never."""
    ours, theirs = socket.socketpair()
    timer = threading.Timer(after_s or 0.0, theirs.sendall, args=(b"PONG",))
    if after_s is not None:
        timer.start()
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        yield reader
    finally:
        if after_s is not None:
            timer.join()
        writer.close()
        await writer.wait_closed()
        theirs.close()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_reply_the_busy_loop_could_not_read_in_time_is_no_timeout(loop: str) -> None:
    """Redis answers in 10 ms; the loop's thread is on the CPU with other work for 300 ms
    (3 deadlines): a wall-clock deadline calls that an outage, this one does not."""

    async def main() -> None:
        async with replier(0.01) as reader:
            asyncio.get_running_loop().call_soon(busy, 0.3)
            started = time.monotonic()
            async with PatientDeadline(0.1):
                assert await reader.read(4) == b"PONG"
            assert time.monotonic() - started >= 0.3

    run(loop, main)


class Stall(asyncio.Protocol):
    """Another connection whose data the loop handles by sleeping 400 ms: the thread does
    not run (as when the process is stopped mid-callback)."""

    def data_received(self, data: bytes) -> None:
        time.sleep(0.4)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_reply_that_came_while_the_thread_did_not_run_is_read_before_failing(
    loop: str,
) -> None:
    """The stall starts at 50 ms, in an I/O callback; the reply comes at 100 ms, within the
    200 ms deadline, and is read before the call fails (on uvloop the deadline's timer
    runs after that callback before the loop polls its sockets again: the look)."""

    async def main() -> None:
        ours, theirs = socket.socketpair()
        await asyncio.get_running_loop().connect_accepted_socket(Stall, sock=ours)
        stall = threading.Timer(0.05, theirs.sendall, args=(b"x",))
        try:
            async with replier(0.1) as reader:
                stall.start()
                async with PatientDeadline(0.2):
                    assert await reader.read(4) == b"PONG"
        finally:
            stall.join()
            theirs.close()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_time_the_thread_did_not_run_is_not_redis_s(loop: str) -> None:
    """The loop is held 400 ms (2 deadlines) right after the call began, before Redis
    had the request, and the reply comes 40 ms after the loop runs again: no timeout.
    (Counting the stop as Redis's time left it the 5 ms look: a stopped sidecar failed
    the calls it sent after the stop.)"""

    async def main() -> None:
        ours, theirs = socket.socketpair()
        await asyncio.get_running_loop().connect_accepted_socket(Stall, sock=ours)
        try:
            async with replier(0.44) as reader:
                theirs.sendall(b"x")
                started = time.monotonic()
                async with PatientDeadline(0.2):
                    assert await reader.read(4) == b"PONG"
                assert time.monotonic() - started >= 0.4
        finally:
            theirs.close()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_silent_redis_fails_at_the_deadline_while_the_loop_is_idle(loop: str) -> None:
    """No reply at all: TierTimeout after the deadline plus the look, named as Redis's time."""

    async def main() -> None:
        async with replier(None) as reader:
            guard = RedisGuard("redis control store", patient=True)
            started = time.monotonic()
            with pytest.raises(TierTimeout, match="no answer within 200 ms of Redis's time"):
                async with guard(0.2):
                    await reader.read(4)
            elapsed = time.monotonic() - started
            assert 0.2 <= elapsed < 0.2 + LOOK_S + 0.3, elapsed
            assert guard.failures == 1

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_cap_ends_a_call_whose_loop_never_stops_working(loop: str) -> None:
    """A loop busy all the time spends none of Redis's time; the cap still ends the call."""

    async def hog() -> None:
        while True:
            busy(0.02)
            await asyncio.sleep(0)

    async def main() -> None:
        async with replier(None) as reader:
            hogging = asyncio.create_task(hog())
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                async with PatientDeadline(0.05, cap_s=0.4):
                    await reader.read(4)
            elapsed = time.monotonic() - started
            hogging.cancel()
            assert 0.4 <= elapsed < 0.4 + 0.3, elapsed

    run(loop, main)


def test_own_time_counts_cpu_and_waits_for_one_but_not_sleep() -> None:
    """own_time_s grows with CPU work (and run-queue waits, on Linux), not with sleep."""
    before = own_time_s()
    time.sleep(0.1)
    slept = own_time_s() - before
    busy(0.1)
    worked = own_time_s() - before - slept
    assert slept < 0.05, slept
    assert worked >= 0.09, worked
