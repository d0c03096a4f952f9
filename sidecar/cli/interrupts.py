"""Waits that a command's SIGINT or SIGTERM ends (`infercache stats --watch`).

A signal handler must take no lock: Python runs it in the main thread between two
bytecodes, and a `threading.Event.set()` there deadlocks when the signal lands while
that thread holds the Event's own lock (inside `Event.wait`): the watch then never
ended (seen under load). Nor may it raise: a KeyboardInterrupt that lands inside a
blocking gRPC call can be swallowed there. So the handler only sets a flag, and the
wait is a `select` on the interpreter's wakeup fd, which the C-level handler writes at
once: the wait ends as soon as the signal comes.
"""

from __future__ import annotations

import os
import select
import signal
from types import FrameType, TracebackType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """`with StopSignals() as stop: while not stop.wait(s): ...` (main thread only).

    Installed whatever the parent left: a background job starts with SIGINT ignored."""

    def __init__(self) -> None:
        self.stopped = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        self._previous_fd = -1

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less if a stop signal comes; whether one came."""
        if not self.stopped:
            select.select([self._read], [], [], seconds)
            try:
                while os.read(self._read, 512):
                    pass
            except BlockingIOError:
                pass
        return self.stopped

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True
