"""Tenants apart inside the engine (issue 25 item 4): every chat or completions body the
gateway sends the model server carries a cache_salt of the tenant's own, on misses,
refreshes and bypasses alike; a client's salt is combined with it, never trusted alone.
What the model server received is read from the tests' model server, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import MODEL, GatewayPod, unsalted

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    pod = GatewayPod(model_server_model=MODEL)
    try:
        yield pod
    finally:
        pod.stop()


def _chat(text: str, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **more}


def _received(pod: GatewayPod, since: int) -> list[dict[str, Any]]:
    return [json.loads(b) for b in pod.upstream.stats()["bodies"][since:]]


def _count(pod: GatewayPod) -> int:
    return len(pod.upstream.stats()["bodies"])


def test_two_tenants_asking_the_same_send_different_salts(pod: GatewayPod) -> None:
    """The same body from acme and from globex reaches the model server with two
    different salts, neither naming its tenant; acme's salt is the same on its next
    request (a refresh), so its own prefix is shared; the rest of the body is what the
    client sent."""
    body = _chat("The same long shared prefix, then a question.")
    before = _count(pod)
    for tenant in ("acme", "globex"):
        status, headers, _ = pod.post(CHAT, body, tenant=tenant)
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
    status, headers, _ = pod.post(CHAT, body, {"cache-control": "no-cache"}, tenant="acme")
    assert (status, headers["x-infercache-cache"]) == (200, "refresh")
    raw = pod.upstream.stats()["bodies"][before:]
    acme, globex, acme_again = (json.loads(b)["cache_salt"] for b in raw)
    assert acme != globex
    assert acme == acme_again
    assert "acme" not in acme
    assert "globex" not in globex
    assert all(json.loads(unsalted(b)) == body for b in raw)


def test_a_client_salt_is_combined_with_the_tenants(pod: GatewayPod) -> None:
    """Both tenants send the same cache_salt: the model server sees two different ones,
    neither the client's."""
    body = _chat("Salted by the client.", cache_salt="shared-by-both")
    before = _count(pod)
    for tenant in ("acme", "globex"):
        assert pod.post(CHAT, body, tenant=tenant)[0] == 200
    salts = [doc["cache_salt"] for doc in _received(pod, before)]
    assert len(set(salts)) == 2
    assert "shared-by-both" not in salts


def test_streamed_bypassed_and_completions_requests_are_salted_too(pod: GatewayPod) -> None:
    """A streamed miss, a bypassed request (`x-infercache-cache-mode: off`) and a
    /v1/completions request all carry acme's salt; an embeddings request (no KV to
    share) is sent as it is."""
    before = _count(pod)
    assert pod.post(CHAT, _chat("stream me", stream=True))[0] == 200
    status, headers, _ = pod.post(CHAT, _chat("bypass me"), {"x-infercache-cache-mode": "off"})
    assert (status, headers["x-infercache-cache"]) == (200, "bypass")
    assert pod.post("/v1/completions", {"model": MODEL, "prompt": "complete me"})[0] == 200
    embed = {"model": MODEL, "input": "embed me"}
    assert pod.post("/v1/embeddings", embed)[0] == 200
    *salted, embedded = _received(pod, before)
    acme = {doc["cache_salt"] for doc in salted}
    assert len(salted) == 3
    assert len(acme) == 1
    assert embedded == embed
