"""A chat or completions hit's usage says the whole prompt came from the cache
(wire/openai/render.py as_cached), the rest of the stored bytes kept."""

from __future__ import annotations

import json

from sidecar.wire.openai.keys import CHAT, EMBEDDINGS
from sidecar.wire.openai.render import Renewal, as_cached, replay_events


def test_as_cached_sets_the_whole_prompt_and_keeps_the_rest() -> None:
    """cached_tokens = prompt_tokens; other details and counts as they were."""
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    assert as_cached(usage) == usage | {"prompt_tokens_details": {"cached_tokens": 9}}
    detailed = usage | {"prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0}}
    assert as_cached(detailed)["prompt_tokens_details"] == {"cached_tokens": 9, "audio_tokens": 0}
    assert as_cached({"prompt_tokens": "9"}) == {"prompt_tokens": "9"}


def test_a_body_is_rewritten_in_place() -> None:
    """Only id, created and the usage member change; a `"usage":` inside the content is
    text, never taken for the member."""
    body = (
        b'{"id": "chatcmpl-1", "created": 5, "choices": [{"index": 0, "message": {"role": '
        b'"assistant", "content": "\\"usage\\": {} and \\u00e9"}, "finish_reason": "stop"}], '
        b'"usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}'
    )
    renewal = Renewal(CHAT)
    out = renewal.apply(body, json.loads(body))
    doc = json.loads(out)
    assert doc["usage"]["prompt_tokens_details"] == {"cached_tokens": 7}
    assert doc["choices"] == json.loads(body)["choices"]
    head = body[: body.index(b'"usage": {"prompt')]
    head = head.replace(b"chatcmpl-1", renewal.new_id)
    assert out.startswith(head.replace(b'"created": 5', b'"created": ' + renewal.created))


def test_a_usage_not_last_is_rewritten_whole() -> None:
    """A body whose usage is not its last member is re-serialised, still accounted."""
    body = b'{"id": "c", "created": 1, "usage": {"prompt_tokens": 3}, "choices": []}'
    doc = json.loads(Renewal(CHAT).apply(body, json.loads(body)))
    assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] == 3


def test_a_streamed_usage_chunk_is_accounted_and_embeddings_are_not() -> None:
    """The usage chunk of a replay carries the hit's usage; an embedding's is the original."""
    chunk = {"id": "c", "created": 1, "choices": [], "usage": {"prompt_tokens": 4}}
    events = [b"data: " + json.dumps(chunk).encode() + b"\n\n"]
    out = replay_events(events, True, Renewal(CHAT))
    assert out is not None
    assert out[0] is not None
    assert json.loads(out[0][6:])["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    body = b'{"data": [], "usage": {"prompt_tokens": 4, "total_tokens": 4}}'
    assert json.loads(Renewal(EMBEDDINGS).apply(body, json.loads(body)))["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 4,
    }
