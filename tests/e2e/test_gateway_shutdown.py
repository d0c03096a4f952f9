"""Requests the gateway's shutdown cuts at the end of the grace period (SIGTERM to a real
gateway process): each gets the gateway's own 503 with `retry-after`, in the API's error
form, never the HTTP server's plain-text 500 (what they got until 2026-12)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest

from tests.support.gateway import MODEL, GatewayPod
from tests.support.messages import anthropic_error, messages_body
from tests.support.processes import RedisServer

pytestmark = pytest.mark.e2e

SLOW_S = 8.0
"""The model server's answer time: longer than the grace period (1 s in tests)."""

Answer = tuple[int, dict[str, str], bytes]
ROUTES = {
    "chat": ("/v1/chat/completions", {}),
    "messages": ("/v1/messages", {"anthropic-version": "2023-06-01"}),
}


def body(route: str, prompt: str) -> dict[str, Any]:
    if route == "messages":
        return messages_body(prompt)
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}


def in_background(pod: GatewayPod, path: str, doc: Any, headers: dict[str, str]) -> Any:
    out: list[Answer] = []
    t = threading.Thread(target=lambda: out.append(pod.post(path, doc, headers)), daemon=True)
    t.start()
    return t, out


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_waiter_cut_at_the_end_of_the_grace_period_gets_a_503(
    redis_server: RedisServer, route: str
) -> None:
    """A holder computing on a slow model server and a waiter on its single flight,
    then SIGTERM: past the grace period both are cut, and both get a 503 with
    `retry-after` and an OpenAI-style error (Anthropic's 529 overloaded_error on
    /v1/messages, the status its SDKs retry a 503 by)."""
    pod = GatewayPod(redis_server.url, slow_s=SLOW_S, gateway_wait_ms=20000)
    path, headers = ROUTES[route]
    try:
        doc = body(route, f"[[slow]] cut {uuid.uuid4().hex}")
        before = pod.upstream_calls()
        holder, held = in_background(pod, path, doc, headers)
        deadline = time.monotonic() + SLOW_S
        while pod.upstream_calls() == before:
            assert time.monotonic() < deadline, "the holder never reached the model server"
            time.sleep(0.05)
        waiter, waited = in_background(pod, path, doc, headers)
        time.sleep(0.5)  # the waiter is in, waiting on the holder's hold
        assert pod.sidecar is not None
        pod.sidecar.stop()  # SIGTERM; grace 1 s < SLOW_S
        holder.join(30)
        waiter.join(30)
        assert pod.upstream_calls() == before + 1  # the waiter never computed
        for status, got, raw in (waited[0], held[0]):
            assert got["content-type"] == "application/json", (status, got, raw)
            assert got["retry-after"] == "1", got
            if route == "messages":
                assert status == 529, raw
                kind, message = anthropic_error(raw)
                assert kind == "overloaded_error"
            else:
                assert status == 503, raw
                err = json.loads(raw)["error"]
                assert (err["type"], err["code"]) == ("server_error", "shutting_down")
                message = err["message"]
            assert "shutting down" in message, message
    finally:
        pod.stop()
