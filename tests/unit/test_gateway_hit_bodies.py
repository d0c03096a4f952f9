"""A whole-body hit rendered from its template is, byte for byte, what Renewal.apply makes
of the stored body for the same id and created, whatever the body spells."""

from __future__ import annotations

import json

import pytest

from sidecar.gateway.hit_bodies import HitBodies
from sidecar.wire.openai.render import Renewal
from sidecar.wire.openai.whole_body import body_doc

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
CHOICES = [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]


def _chat(**extra: object) -> bytes:
    doc = {"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000}
    return json.dumps(doc | {"model": "m", "choices": CHOICES, "usage": USAGE} | extra).encode()


BODIES = {
    "chat": _chat(),
    "compact": json.dumps(json.loads(_chat()), separators=(",", ":")).encode(),
    "created first": b'{"created": 1700000001, "id": "cmpl-1", "choices": [], "usage": null}',
    "escaped id": b'{"id": "chatcmpl-\\u0061bc", "created": 5, "choices": []}',
    "usage not last": json.dumps({"usage": USAGE, "id": "x", "created": 3, "choices": []}).encode(),
    "nested created": _chat(
        choices=[{"index": 0, "message": {"content": '"created": 1700000000'}}]
    ),
    "spells the placeholder id": _chat(system_fingerprint="infercache-id-placeholder-5f0c2a"),
    "spells the placeholder created": _chat(seed=8806131449306528401),
    "no id": b'{"created": 1, "choices": []}',
    "no created": b'{"id": "a", "choices": []}',
    "created a bool": b'{"id": "a", "created": true, "choices": []}',
    "embeddings": b'{"object": "list", "data": [{"embedding": [0.5]}], "model": "m"}',
    "not an answer": b'{"id": "a", "created": 1}',
    "not json": b"{nope",
    "a list": b"[1, 2]",
}


@pytest.mark.parametrize("endpoint", ["chat.completions", "completions", "embeddings"])
@pytest.mark.parametrize("name", list(BODIES))
def test_rendered_equals_applied(endpoint: str, name: str) -> None:
    """Twice per body (template made, then reused), each time with a new renewal."""
    payload = BODIES[name]
    bodies = HitBodies()
    for _ in range(2):
        renewal = Renewal(endpoint)
        doc = body_doc(payload)
        expected = None if doc is None else renewal.apply(payload, doc)
        assert bodies.render(endpoint, payload, renewal) == expected


def test_renewals_differ_per_hit() -> None:
    """The template keeps no hit's id: two hits of one entry get their own."""
    bodies = HitBodies()
    first = bodies.render("chat.completions", BODIES["chat"], Renewal("chat.completions"))
    second = bodies.render("chat.completions", BODIES["chat"], Renewal("chat.completions"))
    assert first is not None
    assert second is not None
    assert json.loads(first)["id"] != json.loads(second)["id"]
    assert json.loads(first)["usage"]["prompt_tokens_details"] == {"cached_tokens": 7}
