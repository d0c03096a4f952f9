"""A Messages event stream judged, collected and renewed (sidecar/wire/anthropic/): only a
whole answer is stored, a replay keeps every event but the renewed two byte for byte,
and stream <-> body conversions happen only where they are exact."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.wire.anthropic import answers
from sidecar.wire.anthropic.sse import MessageCollector, event_doc
from sidecar.wire.anthropic.usage import hit_usage
from tests.support.anthropic_server import message_body, message_events

MODEL = "tiny"
PIECES = ["[v1]", " answer", " x"]


def collect(events: list[bytes], *, step: int = 0) -> MessageCollector:
    c = MessageCollector(1 << 20, MODEL)
    data = b"".join(events)
    chunks = [data[i : i + step] for i in range(0, len(data), step)] if step else events
    for i, chunk in enumerate(chunks):
        c.feed(chunk, i)
    return c


@pytest.mark.parametrize("step", [0, 1, 7])
def test_a_whole_stream_is_stored_event_by_event(step: int) -> None:
    events = message_events(MODEL, "q [[ping]]", PIECES)
    got = collect(events, step=step).result()
    assert got is not None
    assert got.payload == b"".join(events)
    assert len(got.chunks) == len(events)
    assert got.stop_reason == "end_turn"


def _without(events: list[bytes], kind: str) -> list[bytes]:
    return [e for e in events if f"event: {kind}\n".encode() not in e]


def _event(kind: str, doc: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **doc})}\n\n".encode()


BROKEN = {
    "no message_stop": _without(message_events(MODEL, "q", PIECES), "message_stop"),
    "no message_delta": _without(message_events(MODEL, "q", PIECES), "message_delta"),
    "a block not stopped": _without(message_events(MODEL, "q", PIECES), "content_block_stop"),
    "no stop reason": message_events(MODEL, "q [[stop=null]]", PIECES),
    "refusal": message_events(MODEL, "q [[stop=refusal]]", PIECES),
    "error event": message_events(MODEL, "q [[error-event]]", PIECES),
    "another model": message_events("other", "q", PIECES),
    "event after message_stop": [*message_events(MODEL, "q", PIECES), _event("ping", {})],
    "unknown event": [
        *message_events(MODEL, "q", PIECES)[:2],
        _event("surprise", {}),
        *message_events(MODEL, "q", PIECES)[2:],
    ],
    "name and type differ": [
        message_events(MODEL, "q", PIECES)[0].replace(b"event: message_start", b"event: ping"),
        *message_events(MODEL, "q", PIECES)[1:],
    ],
    "no message_start": message_events(MODEL, "q", PIECES)[1:],
}


@pytest.mark.parametrize("case", BROKEN)
def test_an_incomplete_stream_is_not_stored(case: str) -> None:
    assert collect(BROKEN[case]).result() is None


def test_keep_alive_comments_are_not_stored() -> None:
    events = message_events(MODEL, "q", PIECES)
    got = collect([b": keep-alive\n\n", *events]).result()
    assert got is not None
    assert got.payload == b"".join(events)


def test_a_replay_renews_the_id_and_usage_only() -> None:
    events = message_events(MODEL, "q [[cached=1]]", PIECES)
    replayed = answers.replay(events, "msg_new")
    assert replayed is not None
    for old, new in zip(events, replayed, strict=True):
        doc, fresh = event_doc(old), event_doc(new)
        assert doc is not None
        assert fresh is not None
        if doc["type"] == "message_start":
            assert fresh["message"]["id"] == "msg_new"
            assert fresh["message"]["usage"]["cache_read_input_tokens"] == 2
            assert fresh["message"]["usage"]["input_tokens"] == 0
        elif doc["type"] == "message_delta":
            assert fresh["usage"] == {
                "input_tokens": 0,
                "output_tokens": len(PIECES),
                "cache_read_input_tokens": 2,
                "cache_creation_input_tokens": 0,
            }
        else:
            assert new == old


def test_one_text_block_converts_both_ways() -> None:
    body = answers.body_from_events(message_events(MODEL, "q", PIECES), "msg_a")
    assert body is not None
    doc = json.loads(body)
    assert doc["content"] == [{"type": "text", "text": "".join(PIECES)}]
    assert (doc["id"], doc["stop_reason"], doc["usage"]["input_tokens"]) == ("msg_a", "end_turn", 0)
    made = answers.events_from_body(message_body(MODEL, "q", "".join(PIECES)), "msg_b")
    assert made is not None
    assert collect(made).result() is not None
    assert answers.body_from_events(made, "msg_c") is not None


def test_anything_else_is_not_converted() -> None:
    """tool_use blocks, several blocks, an empty answer: recomputed instead."""
    assert answers.body_from_events(message_events(MODEL, "q [[tool]]", PIECES), "m") is None
    assert answers.body_from_events(message_events(MODEL, "q", []), "m") is None
    assert answers.events_from_body(message_body(MODEL, "q [[tool]]", "t"), "m") is None
    assert answers.events_from_body(message_body(MODEL, "q", ""), "m") is None


def test_a_hits_usage_is_the_whole_prompt_read_from_cache() -> None:
    """input + cache creation + cache reads of the stored answer, all read; none computed."""
    stored = {
        "input_tokens": 6,
        "output_tokens": 12,
        "cache_creation_input_tokens": 32,
        "cache_read_input_tokens": 16,
    }
    assert hit_usage(stored) == {
        "input_tokens": 0,
        "output_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 54,
    }
