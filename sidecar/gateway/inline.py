"""Running a coroutine's first step in the caller's own step.

A hit answered from memory never waits: it authenticates, keys, looks up and writes
its response without giving the event loop a turn. Guarding it as if it might (a
watcher task for the client's disconnect, a timer for the body's deadline) costs a
task, a timer handle and their cancellation per request, about as much as the hit's
own lookup. `first_step` runs a coroutine until it first waits; only a coroutine that
did wait needs the guard, set up there and then (the Resumed it returns goes on from that wait).
What the guard watches for could only be acted on at a wait anyway, so nothing is
noticed later than before: a cancellation reaches a coroutine at its waits only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any


def first_step(step: Awaitable[Any]) -> tuple[bool, Any]:
    """Run `step` until it ends or first waits: (True, its result) when it ended, (False,
    a Resumed to await for the rest) when it waits. Its exception, if it raised,
    propagates (it is then finished)."""
    it = step.__await__()
    try:
        waiting = next(it)
    except StopIteration as stop:
        return True, stop.value
    return False, Resumed(it, waiting)


class Resumed:
    """The rest of an awaitable that `first_step` left waiting on `waiting`: awaiting
    this hands that wait to the awaiting task, then everything the awaitable does after
    it, exactly as `await` would have (values sent, exceptions and cancellations thrown
    in, closed on GeneratorExit)."""

    __slots__ = ("_it", "_waiting")

    def __init__(self, it: Generator[Any, Any, Any], waiting: Any) -> None:
        self._it, self._waiting = it, waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        it, waiting = self._it, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                it.close()
                raise
            except BaseException as exc:  # a cancellation (or any throw): the awaitable's
                try:
                    waiting = it.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                waiting = it.send(sent)
            except StopIteration as stop:
                return stop.value
