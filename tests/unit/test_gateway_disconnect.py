"""The gateway's disconnect watcher (sidecar/gateway/asgi.py): a client that goes away
before it has the whole response cancels the request's work; the "disconnect" ASGI
reports once the response is complete does not cancel what follows it (the store)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sidecar.gateway.asgi import _until_disconnect
from sidecar.gateway.reply import Headers, Reply

pytestmark = pytest.mark.timeout(10)


class _Client:
    """ASGI receive as uvicorn gives it once the body is read: it waits, then says
    "http.disconnect" when the client goes away or the response is complete."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.event.wait()
        return {"type": "http.disconnect"}


def _reply(client: _Client) -> Reply:
    async def start(status: int, headers: Headers) -> None:
        pass

    async def body(data: bytes, more: bool) -> None:
        if not more:
            client.event.set()  # uvicorn: response complete, receive wakes up

    return Reply(start, body)


async def test_a_client_gone_mid_response_cancels_the_work() -> None:
    """The work is cancelled, the call returns (nobody is left to answer), and the
    request's task carries no cancellation on."""
    client = _Client()
    reply = _reply(client)
    steps: list[str] = []

    async def work() -> None:
        await reply.start(200, [])
        try:
            client.event.set()  # the client hangs up while the answer is still coming
            await asyncio.sleep(5)
            steps.append("finished")
        except asyncio.CancelledError:
            steps.append("cancelled")
            raise

    await _until_disconnect(work(), client.receive, reply)
    assert steps == ["cancelled"]
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_what_follows_a_complete_response_is_not_cancelled() -> None:
    """The store after the last byte runs to its end although receive() now says
    "disconnect" (it suspends: a warm tier's round trip)."""
    client = _Client()
    reply = _reply(client)
    steps: list[str] = []

    async def work() -> None:
        await reply.whole(200, [], b"{}")
        await asyncio.sleep(0.05)  # the store's round trip; the watcher runs meanwhile
        steps.append("stored")

    await _until_disconnect(work(), client.receive, reply)
    assert steps == ["stored"]


async def test_a_cancellation_from_outside_propagates() -> None:
    """A server shutdown cancelling the request is not mistaken for a client gone."""
    client = _Client()
    reply = _reply(client)

    async def work() -> None:
        await asyncio.sleep(5)

    request = asyncio.create_task(_until_disconnect(work(), client.receive, reply))
    await asyncio.sleep(0.01)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request


async def test_the_work_s_own_error_reaches_the_caller() -> None:
    """An error of the work is raised to GatewayApp (which answers it), not swallowed."""
    client = _Client()
    reply = _reply(client)

    async def work() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await _until_disconnect(work(), client.receive, reply)


async def test_work_that_never_waits_runs_without_a_watcher() -> None:
    """A hit from memory ends in the request's own step: receive() is not called and
    no task is made beside it."""
    client = _Client()
    reply = _reply(client)
    calls: list[str] = []

    async def receive() -> dict[str, object]:
        calls.append("receive")
        return {"type": "http.disconnect"}

    before = len(asyncio.all_tasks())
    await _until_disconnect(reply.whole(200, [], b"{}"), receive, reply)
    assert reply.finished
    assert calls == []
    assert len(asyncio.all_tasks()) == before
