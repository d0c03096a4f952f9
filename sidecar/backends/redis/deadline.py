"""Deadlines that count Redis's time, not the sidecar's own (the control plane's calls).

On a busy host the sidecar's event-loop thread may wait for a CPU, run other work, or
not run at all (a stopped process, a frozen VM, a throttled container) for longer than
a whole deadline while Redis answered within a millisecond: a plain wall-clock deadline
then reports a healthy Redis as down. A patient deadline expires only once Redis has
had the whole deadline of time in which the sidecar was there to read its answer:

- the deadline is counted in ticks (every TICK_S at most); a tick credits Redis with
  the time since the last one less the thread's own time meanwhile (its CPU time and,
  on Linux, its run-queue delay from /proc/thread-self/schedstat), and never more than
  the tick was meant to last: a tick that comes late means the loop was held up (busy,
  starved, stopped), and that time is not Redis's. (Counting a stop as Redis's time
  failed calls whose request was only sent after the stop: Redis then had a few ms.)
- once the deadline is spent so counted, the call still gets one more look after the
  loop has polled its sockets, so a reply that arrived meanwhile is read first (again
  while the loop was held up past that look: it may not have polled yet);
- whatever the host does, `cap_s` of wall time ends the call.

A Redis that is stopped or gone spends its time at the wall clock's rate while the
sidecar waits idle (each tick on time), so the call still fails at its deadline plus
a few ms (timer slack, the look).
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

CAP_FACTOR = 10
"""A patient call ends after this many deadlines of wall time, however busy the host."""
LOOK_S = 0.005
"""How long after the deadline is spent the call looks again (one I/O poll in between)."""
TICK_S = 0.02
"""The longest stretch credited to Redis at once: a loop held up longer gets only this."""
SLACK_S = 0.002
"""A tick this late is still on time (timer resolution, one ordinary loop iteration)."""
_SCHEDSTAT = "/proc/thread-self/schedstat"


def _run_delay_s() -> float:
    """Seconds this thread has waited on a run queue (0 where the kernel does not say).

    A procfs read: served from memory, it never blocks the loop on a disk."""
    try:
        with open(_SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def own_time_s() -> float:
    """Seconds this thread has spent on a CPU or waiting for one (monotonic)."""
    return time.thread_time() + _run_delay_s()


class PatientDeadline:
    """`async with PatientDeadline(d, cap):` like `asyncio.timeout(d)` (TimeoutError on
    expiry), with `d` counted as Redis's time (see the module docstring)."""

    __slots__ = (
        "_cap_s",
        "_deadline_s",
        "_handle",
        "_last",
        "_look_due",
        "_own",
        "_redis_s",
        "_t0",
        "_tick_due",
        "_timeout",
    )

    def __init__(self, deadline_s: float, cap_s: float | None = None) -> None:
        self._deadline_s = deadline_s
        self._cap_s = deadline_s * CAP_FACTOR if cap_s is None else cap_s
        self._timeout = asyncio.timeout(None)
        self._handle: asyncio.TimerHandle | None = None
        self._look_due: float | None = None
        self._t0 = 0.0
        self._last = 0.0
        self._tick_due = 0.0
        self._own = 0.0
        self._redis_s = 0.0

    async def __aenter__(self) -> PatientDeadline:
        await self._timeout.__aenter__()
        loop = asyncio.get_running_loop()
        self._t0 = self._last = loop.time()
        self._own = own_time_s()
        self._schedule(loop, self._t0)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        await self._timeout.__aexit__(kind, exc, tb)

    def describe(self) -> str:
        """What ran out, for the error message."""
        wall = asyncio.get_running_loop().time() - self._t0
        return (
            f"no answer within {self._deadline_s * 1000:.0f} ms of Redis's time "
            f"({wall * 1000:.0f} ms in all; the sidecar's own CPU, waits and stops "
            f"not counted, {self._cap_s * 1000:.0f} ms at most)"
        )

    def _schedule(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """The next tick: when the deadline would be spent, TICK_S away at most."""
        # Not less than a look apart: a loop that is busy all the time spends Redis's
        # time slowly, and must not spin on this check meanwhile.
        step = min(max(self._deadline_s - self._redis_s, LOOK_S), TICK_S)
        self._tick_due = now + step
        self._handle = loop.call_at(self._tick_due, self._check)

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._t0 >= self._cap_s:
            self._timeout.reschedule(now)
            return
        if self._look_due is None:
            own = own_time_s()
            meant = self._tick_due - self._last + SLACK_S
            self._redis_s += max(0.0, min(now - self._last - (own - self._own), meant))
            self._last, self._own = now, own
            if self._redis_s < self._deadline_s:
                self._schedule(loop, now)
                return
        elif now - self._look_due <= LOOK_S:
            # The look came on time: the loop polled its sockets since the deadline was
            # spent, and the reply was not there.
            self._timeout.reschedule(now)
            return
        # Spent (or the look came late: the loop was held up and may not have read a
        # reply that is waiting): look again after the loop's next poll.
        self._look_due = now + LOOK_S
        self._handle = loop.call_at(self._look_due, self._check)
