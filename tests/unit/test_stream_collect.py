"""Collecting an OpenAI SSE stream into its stored form (wire/openai/sse.py), and prewarm's
reading of a gateway record's answer with the gateway's own rules (wire/openai/answers.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.entries import ChunkMeta
from sidecar.gateway.reply import Reply
from sidecar.gateway.tee import tee_stream
from sidecar.wire.openai.answers import BadAnswer, Received, gateway_answer
from sidecar.wire.openai.routes import AnswerForm
from sidecar.wire.openai.sse import StreamCollector
from sidecar.wire.openai.whole_body import complete_body

DONE = b"data: [DONE]\n\n"
SSE_TYPE = "text/event-stream"
LIMIT = 1 << 20


def sse(doc: Any) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def chunk(content: str, finish: str | None = None, model: str = "m") -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return sse({"id": "x", "created": 1, "model": model, "choices": [choice]})


EVENTS = [chunk("a"), chunk(" b"), chunk("", "stop")]
STREAM = b"".join(EVENTS) + DONE


def collect(pieces: list[bytes], limit: int = LIMIT) -> StreamCollector:
    collector = StreamCollector(limit)
    for i, piece in enumerate(pieces):
        collector.feed(piece, 10 * i)
    return collector


def test_a_complete_stream_is_its_events_and_boundaries_without_done() -> None:
    """Payload = the events' exact bytes joined ([DONE] left out: replays add it), one
    chunk per event with its size and arrival offset, the first finish_reason."""
    got = collect([*EVENTS, DONE]).result()
    assert got is not None
    assert got.payload == b"".join(EVENTS)
    assert got.chunks == tuple(ChunkMeta(len(e), 1, 10 * i) for i, e in enumerate(EVENTS))
    assert (got.finish_reason, got.models) == ("stop", frozenset({"m"}))


def test_any_cut_of_the_bytes_gives_the_same_stored_stream() -> None:
    """Events split across pieces anywhere are reassembled: same payload and sizes."""
    whole = collect([STREAM]).result()
    assert whole is not None
    for cut in range(1, len(STREAM)):
        got = collect([STREAM[:cut], STREAM[cut:]]).result()
        assert got is not None, cut
        assert got.payload == whole.payload
        assert [c.size_bytes for c in got.chunks] == [c.size_bytes for c in whole.chunks]


@pytest.mark.parametrize(
    "stream",
    [
        b"".join(EVENTS),  # no [DONE]
        chunk("a") + DONE,  # no finish_reason
        STREAM[:-3],  # cut inside [DONE]
        b"".join(EVENTS) + b'data: {"id": "x", "cho',  # cut mid-event, no [DONE]
        chunk("a") + sse({"error": {"message": "x"}}) + EVENTS[2] + DONE,  # error event
        STREAM + chunk("late"),  # something after [DONE]
        b"data: not json\n\n" + STREAM,
        DONE,  # no choice at all
    ],
    ids=["no-done", "no-finish", "cut-done", "mid-event", "error", "after-done", "junk", "empty"],
)
def test_incomplete_or_broken_streams_are_not_stored(stream: bytes) -> None:
    """Every choice's finish_reason, no error, [DONE] and nothing after it, or nothing."""
    assert collect([stream]).result() is None


def test_a_stream_over_the_limit_is_not_stored() -> None:
    """Over `limit` in all, or one event longer than it: nothing, and no longer looked at."""
    total = sum(len(e) for e in EVENTS)
    over = collect([STREAM], limit=total - 1)
    assert over.result() is None
    assert not over.whole
    assert collect([STREAM], limit=total).result() is not None
    long_event = collect([b"data: " + b"x" * 100], limit=50)
    assert (long_event.whole, long_event.result()) == (False, None)


async def test_the_gateway_and_prewarm_store_the_same_form() -> None:
    """The same upstream bytes teed by the gateway (a streamed miss) and read by prewarm
    (a recorded streamed request) give the same payload, chunk sizes and finish_reason."""
    sent: list[bytes] = []

    async def start(status: int, headers: list[tuple[bytes, bytes]]) -> None:
        pass

    async def body(data: bytes, more: bool) -> None:
        sent.append(data)

    async def pieces() -> Any:
        for piece in (STREAM[:7], STREAM[7:40], STREAM[40:]):
            yield piece

    teed = await tee_stream(pieces(), 0.0, Reply(start, body), LIMIT, "m")
    assert teed is not None
    assert b"".join(sent) == STREAM  # forwarded as it came
    received = Received(SSE_TYPE, ((0, STREAM[:7]), (5, STREAM[7:40]), (9, STREAM[40:])))
    warmed = gateway_answer(received, "m", AnswerForm.SSE, LIMIT)
    assert warmed.payload == teed.payload
    assert [c.size_bytes for c in warmed.chunks] == [c.size_bytes for c in teed.chunks]
    assert warmed.finish_reason == teed.finish_reason == "stop"


def whole_body(**overrides: Any) -> bytes:
    message = {"role": "assistant", "content": "hi"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    doc = {"id": "c", "created": 1, "model": "m", "choices": [choice]} | overrides
    return json.dumps(doc).encode()


def test_a_whole_body_record_stores_the_body_as_received() -> None:
    """JSON form: the body byte for byte, a tool-call answer too (no text: a form-less
    record's `text` payload would refuse it), whatever the payload setting."""
    calls = [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    tool = whole_body(
        choices=[
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ]
    )
    for body in (whole_body(), tool):
        answer = gateway_answer(
            Received("application/json", ((0, body),)), "m", AnswerForm.JSON, LIMIT
        )
        assert (answer.payload, answer.chunks) == (body, ())


def test_a_streamed_record_answered_whole_is_stored_whole() -> None:
    """As the gateway does (flow.py): a streamed request the upstream answers with JSON
    is stored as that whole body."""
    body = whole_body()
    answer = gateway_answer(Received("application/json", ((0, body),)), "m", AnswerForm.SSE, LIMIT)
    assert (answer.payload, answer.chunks) == (body, ())


@pytest.mark.parametrize(
    ("received", "form", "reason"),
    [
        (Received(SSE_TYPE, ((0, b"".join(EVENTS)),)), AnswerForm.SSE, "stream_incomplete"),
        (
            Received(SSE_TYPE, ((0, chunk("a", "stop", model="other") + DONE),)),
            AnswerForm.SSE,
            "wrong_model",
        ),
        (Received(SSE_TYPE, ((0, STREAM),)), AnswerForm.JSON, "upstream_bad_response"),
        (
            Received("application/json", ((0, whole_body(model="other")),)),
            AnswerForm.JSON,
            "wrong_model",
        ),
        (
            Received(
                "application/json",
                ((0, whole_body(choices=[{"index": 0, "message": {"content": "x"}}])),),
            ),
            AnswerForm.JSON,
            "upstream_incomplete",
        ),
        (Received("application/json", ((0, b"<html>"),)), AnswerForm.JSON, "upstream_bad_response"),
    ],
    ids=["stream-cut", "stream-model", "sse-for-json", "body-model", "no-finish", "not-json"],
)
def test_answers_the_gateway_would_not_store_are_refused(
    received: Received, form: AnswerForm, reason: str
) -> None:
    """Each with the reason prewarm reports."""
    with pytest.raises(BadAnswer) as err:
        gateway_answer(received, "m", form, LIMIT)
    assert err.value.reason == reason


def test_a_stream_over_the_payload_limit_is_refused() -> None:
    """Over the payload limit: upstream_response_too_large, nothing to store."""
    with pytest.raises(BadAnswer) as err:
        gateway_answer(Received(SSE_TYPE, ((0, STREAM),)), "m", AnswerForm.SSE, 20)
    assert err.value.reason == "upstream_response_too_large"


@pytest.mark.parametrize(
    ("reason", "stored"),
    [
        ("stop", True),
        ("length", True),
        ("tool_calls", True),
        ("function_call", True),
        ("abort", False),
        ("error", False),
        ("content_filter", False),
        ("cancelled", False),
    ],
)
def test_only_allow_listed_finish_reasons_are_stored_by_gateway_and_prewarm(
    reason: str, stored: bool
) -> None:
    """vLLM ends a cut-off request with finish_reason abort (or error) in a 200: that is
    no complete answer. Whole bodies and streams, gateway and prewarm, store only stop,
    length, tool_calls and function_call (content_filter deliberately not)."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}}
    body = whole_body(choices=[choice | {"finish_reason": reason}])
    assert complete_body(body, "m") is stored
    stream = chunk("a") + chunk("", reason) + DONE
    assert (collect([stream]).result() is not None) is stored
    for received, form in (
        (Received("application/json", ((0, body),)), AnswerForm.JSON),
        (Received(SSE_TYPE, ((0, stream),)), AnswerForm.SSE),
    ):
        if stored:
            assert gateway_answer(received, "m", form, LIMIT).payload
        else:
            with pytest.raises(BadAnswer) as err:
                gateway_answer(received, "m", form, LIMIT)
            expected = "upstream_incomplete" if form is AnswerForm.JSON else "stream_incomplete"
            assert err.value.reason == expected
