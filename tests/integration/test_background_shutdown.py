"""Stopping a sidecar ends its background loops even when a cancellation gets lost."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from sidecar.config import load_config
from sidecar.host import start_server
from tests.support.sidecars import config_overrides

pytestmark = pytest.mark.timeout(30)


async def _loses_first_cancellation() -> None:
    """A loop whose first CancelledError is swallowed, as Python 3.11's asyncio.wait_for
    (inside redis-py) does when the awaited I/O completes at the moment of the cancel."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    await asyncio.Event().wait()


async def test_stop_finishes_despite_a_lost_cancellation() -> None:
    """RunningServer.stop returns (within seconds) although one background task ignored
    the first cancellation; the task ends cancelled."""
    running = await start_server(load_config({}, config_overrides(None)))
    stubborn = asyncio.create_task(_loses_first_cancellation())
    running.tasks.append(stubborn)
    await asyncio.sleep(0)  # let it reach its first wait
    stopping = asyncio.create_task(running.stop(0))
    done, _ = await asyncio.wait([stopping], timeout=10)
    assert stopping in done, "stop() hung on a task that lost its cancellation"
    stopping.result()
    assert stubborn.cancelled()
    assert all(t.done() for t in running.tasks)
