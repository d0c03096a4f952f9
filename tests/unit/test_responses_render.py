"""Responses answers judged and renewed without sockets (wire/openai/responses_sse.py,
responses_render.py): what is stored, and what a hit sends."""

from __future__ import annotations

import json
from typing import Any

from sidecar.wire.openai.responses_render import (
    ResponsesRenewal,
    as_cached,
    body_from_events,
    renewed_body,
    replay_events,
)
from sidecar.wire.openai.responses_sse import ResponsesStreamCollector
from tests.support.model_server_responses import stream_events, whole_answer

REQ: dict[str, Any] = {"model": "tiny", "input": "hi"}
PIECES = ["one", " two", " three"]


def events(prompt: str = "hi") -> list[bytes]:
    return stream_events(REQ, "tiny", prompt, PIECES)


def collected(stream: list[bytes], limit: int = 1 << 20, model: str = "tiny") -> Any:
    c = ResponsesStreamCollector(limit, model)
    for i, event in enumerate(stream):
        c.feed(event, i)
    return c


def data(event: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(event.split(b"data: ", 1)[1])
    return doc


def test_a_completed_stream_is_kept_event_by_event() -> None:
    """Every event its own chunk, bytes as received."""
    stream = events()
    got = collected(stream).result()
    assert got is not None
    assert got.payload == b"".join(stream)
    assert [c.size_bytes for c in got.chunks] == [len(e) for e in stream]


def test_streams_that_are_not_a_completed_answer_are_not_kept() -> None:
    """Incomplete status, an error event, a cut, anything after the end, another model,
    over the limit: nothing to store."""
    assert collected(events("[[finish=length]]")).result() is None
    assert collected(events("[[error-event]]")).result() is None
    cut = collected(events("[[cut]]"))
    assert cut.result() is None
    assert not cut.ended
    assert collected([*events(), events()[2]]).result() is None
    assert collected(events(), model="other").result() is None
    half = events()
    assert collected([*half[:-1], half[-1][:40]]).result() is None
    over = collected(events(), limit=100)
    assert over.result() is None
    assert over.ended  # still followed to its end


def test_a_replay_renews_ids_consistently_and_keeps_the_rest() -> None:
    """Fresh resp_/msg_ ids, the same one wherever an old one was; sequence numbers,
    deltas and the event lines kept; the usage counts the whole prompt as cached."""
    stream = events()
    out = replay_events(stream, ResponsesRenewal())
    assert out is not None
    assert len(out) == len(stream)
    before, after = [data(e) for e in stream], [data(e) for e in out]
    assert [d["sequence_number"] for d in after] == [d["sequence_number"] for d in before]
    assert [e.split(b"\n", 1)[0] for e in out] == [e.split(b"\n", 1)[0] for e in stream]
    response_ids = {d["response"]["id"] for d in after if "response" in d}
    item_ids = {d["item_id"] for d in after if "item_id" in d}
    assert len(response_ids) == 1
    assert len(item_ids) == 1
    assert response_ids.pop().startswith("resp_")
    assert item_ids == {after[-1]["response"]["output"][0]["id"]}
    assert item_ids.isdisjoint({d.get("item_id") for d in before})
    deltas = [d["delta"] for d in after if d["type"] == "response.output_text.delta"]
    assert deltas == PIECES
    usage = after[-1]["response"]["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] == usage["input_tokens"]


def test_a_stored_stream_answers_whole_with_its_completed_response() -> None:
    """The response.completed object, renewed; nothing when the stream did not complete."""
    body = body_from_events(events(), "tiny", ResponsesRenewal())
    assert body is not None
    doc = json.loads(body)
    assert doc["output"][0]["content"][0]["text"] == "one two three"
    assert body_from_events(events("[[finish=length]]"), "tiny", ResponsesRenewal()) is None


def test_a_whole_answer_is_renewed() -> None:
    """Fresh id, created_at, item ids; cached tokens the whole prompt."""
    stored = json.dumps(whole_answer(REQ, "tiny", "hi there", "an answer")).encode()
    renewal = ResponsesRenewal()
    doc, old = json.loads(renewed_body(stored, renewal) or b""), json.loads(stored)
    assert doc["id"] != old["id"]
    assert doc["output"][0]["id"] != old["output"][0]["id"]
    assert doc["created_at"] == renewal.created_at
    assert doc["output"][0]["content"] == old["output"][0]["content"]
    assert doc["usage"]["input_tokens_details"]["cached_tokens"] == 2


def test_as_cached() -> None:
    """Only the cache fields change; a usage it cannot read is left as it is."""
    usage = {
        "input_tokens": 7,
        "input_tokens_details": {
            "cached_tokens": 3,
            "cache_write_tokens": 4,
            "input_tokens_per_turn": [7],
            "cached_tokens_per_turn": [3],
        },
        "output_tokens": 2,
    }
    assert as_cached(usage) == usage | {
        "input_tokens_details": {
            "cached_tokens": 7,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [7],
            "cached_tokens_per_turn": [7],
        }
    }
    assert as_cached(None) is None
    assert as_cached({"input_tokens": "x"}) == {"input_tokens": "x"}
