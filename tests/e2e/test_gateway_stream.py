"""Streaming through the gateway: SSE replay with the original events and boundaries,
conversions between streamed and whole answers, and streams that must not be stored."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod

pytestmark = pytest.mark.e2e

SLOW_S = 20.0


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """A gateway pod whose [[trickle]] streams last SLOW_S seconds."""
    p = GatewayPod(slow_s=SLOW_S)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def sdk(pod: GatewayPod) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as c:
        yield c


def unique(text: str = "stream") -> str:
    return f"{text} {uuid.uuid4().hex}"


def body(prompt: str, **kw: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
    } | kw


def raw_stream(pod: GatewayPod, doc: dict[str, Any]) -> tuple[str, list[bytes]]:
    """(x-infercache-cache, the SSE events exactly as received, split at blank lines)."""
    headers = {"authorization": f"Bearer {API_KEYS['acme']}"}
    with httpx.stream(
        "POST", pod.base_url + "/chat/completions", json=doc, headers=headers, timeout=30
    ) as resp:
        assert resp.status_code == 200
        data = resp.read()
        outcome = resp.headers["x-infercache-cache"]
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    return outcome, events


def without_identity(event: bytes) -> Any:
    """An event's JSON with the two values a hit renews (id, created) taken out."""
    assert event.startswith(b"data: ")
    doc = json.loads(event[len(b"data: ") :])
    assert isinstance(doc["id"], str)
    assert isinstance(doc["created"], int)
    return {k: v for k, v in doc.items() if k not in ("id", "created")}


def streamed_twice(sdk: openai.OpenAI, prompt: str) -> list[tuple[str, list[Any]]]:
    """The same streamed chat asked twice through the SDK: (x-infercache-cache, the
    parsed chunks) of each."""
    runs = []
    for _ in range(2):
        raw = sdk.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, stream=True
        )
        runs.append((raw.headers["x-infercache-cache"], list(raw.parse())))
    return runs


def test_sdk_stream_miss_then_hit_chunk_by_chunk(pod: GatewayPod, sdk: openai.OpenAI) -> None:
    """The SDK's parsed replay equals the original stream chunk by chunk, with a fresh id."""
    before = pod.upstream_calls()
    (o1, first), (o2, second) = streamed_twice(sdk, unique())
    assert (o1, o2) == ("miss", "hit")
    assert pod.upstream_calls() == before + 1
    assert len(first) == len(second) > 3
    assert [c.choices[0].delta.content for c in first] == [
        c.choices[0].delta.content for c in second
    ]
    assert [c.choices[0].finish_reason for c in second][-1] == "stop"
    assert {c.id for c in second} != {c.id for c in first}
    assert len({c.id for c in second}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in second)
    assert text.startswith("[v1] answer")


def test_a_stream_the_sdk_closes_on_done_before_the_upstream_ends_is_stored(
    pod: GatewayPod, sdk: openai.OpenAI
) -> None:
    """The sync SDK closes the connection as soon as it reads [DONE]. [[linger]] makes the
    model server end its response 1 s after [DONE], so the client is gone before the
    upstream answer is: that is a complete answer, not an abort, and the next ask is a
    hit with the same chunks."""
    before = pod.upstream_calls()
    runs = streamed_twice(sdk, unique("[[linger]]"))
    (o1, first), (o2, second) = [(o, [c.choices[0].delta.content for c in cs]) for o, cs in runs]
    assert (o1, o2) == ("miss", "hit")
    assert pod.upstream_calls() == before + 1
    assert first == second
    assert "".join(c or "" for c in second).startswith("[v1] answer")


def test_sse_replay_is_byte_identical_but_for_id_and_created(pod: GatewayPod) -> None:
    """Raw SSE: the replay has the same events, boundaries and payload bytes (save the
    renewed id and created), ending with data: [DONE]."""
    doc = body(unique(), stream=True)
    o1, original = raw_stream(pod, doc)
    o2, replay = raw_stream(pod, doc)
    assert (o1, o2) == ("miss", "hit")
    assert original[-1] == replay[-1] == b"data: [DONE]\n\n"
    assert len(original) == len(replay)
    for a, b in zip(original[:-1], replay[:-1], strict=True):
        assert without_identity(a) == without_identity(b)
        old, new = json.loads(a[6:]), json.loads(b[6:])
        # Only the two values differ, in place: every other byte is the original's.
        expected = a.replace(f'"id": "{old["id"]}"'.encode(), f'"id": "{new["id"]}"'.encode(), 1)
        expected = expected.replace(
            f'"created": {old["created"]}'.encode(), f'"created": {new["created"]}'.encode(), 1
        )
        assert b == expected


def test_whole_answer_serves_a_stream_and_back(pod: GatewayPod, sdk: openai.OpenAI) -> None:
    """stream is not keyed: a whole answer replays as a stream, a stream answers a whole
    request, with the same text either way."""
    before = pod.upstream_calls()
    p1, p2 = unique("whole-first"), unique("stream-first")
    whole = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": p1}], temperature=0
    )
    streamed = list(
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": p1}], temperature=0, stream=True
        )
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed)
        == whole.choices[0].message.content
    )
    assert streamed[-1].choices[0].finish_reason == "stop"
    list(
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": p2}],
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": p2}], temperature=0
    )
    assert raw.headers["x-infercache-cache"] == "hit"
    joined = raw.parse()
    assert (joined.choices[0].message.content or "").startswith("[v1] answer")
    assert joined.choices[0].finish_reason == "stop"
    assert joined.usage is not None
    assert pod.upstream_calls() == before + 2


def test_a_stream_stored_without_usage_does_not_answer_a_whole_request(
    pod: GatewayPod, sdk: openai.OpenAI
) -> None:
    """A whole answer always reports usage; a stream stored without its usage chunk
    cannot make one, so the whole request is computed (and stored) instead."""
    prompt = unique("stream-no-usage")
    list(
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, stream=True
        )
    )
    before = pod.upstream_calls()
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0
    )
    assert raw.headers["x-infercache-cache"] == "miss"
    assert raw.parse().usage is not None
    assert pod.upstream_calls() == before + 1


def test_usage_chunk_only_when_asked(pod: GatewayPod, sdk: openai.OpenAI) -> None:
    """A stored stream with a usage chunk replays it only to requests that ask for usage."""
    prompt = unique("usage")
    args: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "stream": True,
    }
    asked = list(sdk.chat.completions.create(**args, stream_options={"include_usage": True}))
    assert asked[-1].usage is not None
    assert asked[-1].choices == []
    raw = sdk.chat.completions.with_raw_response.create(**args)
    plain = list(raw.parse())
    assert raw.headers["x-infercache-cache"] == "hit"
    assert all(c.choices for c in plain)
    assert all(c.usage is None for c in plain)


def ended_cleanly(pod: GatewayPod, doc: dict[str, Any]) -> tuple[str, bool]:
    """(x-infercache-cache, whether the response body ended cleanly)."""
    headers = {"authorization": f"Bearer {API_KEYS['acme']}"}
    with httpx.stream(
        "POST", pod.base_url + "/chat/completions", json=doc, headers=headers, timeout=30
    ) as resp:
        try:
            resp.read()
        except httpx.RemoteProtocolError:
            return resp.headers["x-infercache-cache"], False
        return resp.headers["x-infercache-cache"], True


@pytest.mark.parametrize(
    ("marker", "clean"), [("[[cut]]", False), ("[[no-done]]", False), ("[[error-event]]", True)]
)
def test_incomplete_streams_are_never_stored(pod: GatewayPod, marker: str, clean: bool) -> None:
    """No finish_reason, no [DONE], or an error event: forwarded as it came, not stored.
    A stream the model server ended before [DONE] is left unfinished (a broken response,
    so no SDK takes the partial text for the answer; it ended cleanly until 2026-12-02);
    one with an error event ends with [DONE] and is relayed to its end."""
    doc = body(unique(marker), stream=True)
    before = pod.upstream_calls()
    outcomes = [ended_cleanly(pod, doc) for _ in range(2)]
    assert outcomes == [("miss", clean), ("miss", clean)]
    assert pod.upstream_calls() == before + 2


def test_a_stream_from_another_model_is_forwarded_but_never_stored(pod: GatewayPod) -> None:
    """Events naming a model other than the one asked for (a misrouted upstream) are not
    what the key says: passed on as they came, never stored (as for a whole body)."""
    doc = body(unique("[[wrong-model]]"), stream=True)
    before = pod.upstream_calls()
    first, events = raw_stream(pod, doc)
    assert first == "miss"
    assert json.loads(events[0][len(b"data: ") :])["model"] == "someone-else"
    assert raw_stream(pod, doc)[0] == "miss"
    assert pod.upstream_calls() == before + 2


def test_client_disconnect_cancels_upstream_and_stores_nothing(pod: GatewayPod) -> None:
    """A client that goes away mid-stream: the upstream call is cancelled, nothing stored."""
    doc = body(unique("[[trickle]]"), stream=True)
    headers = {"authorization": f"Bearer {API_KEYS['acme']}"}
    aborted = pod.upstream.stats()["aborted"]
    with httpx.stream(
        "POST", pod.base_url + "/chat/completions", json=doc, headers=headers, timeout=30
    ) as resp:
        assert resp.headers["x-infercache-cache"] == "miss"
        first = next(resp.iter_raw())
        assert first.startswith(b"data: ")
    # The model server notices at its next write (a tick every 0.2 s), long before SLOW_S.
    deadline = time.monotonic() + SLOW_S / 2
    while pod.upstream.stats()["aborted"] == aborted:
        assert time.monotonic() < deadline, "the upstream stream was not cancelled"
        time.sleep(0.1)
    # Nothing was stored: the same request misses again (closed at once).
    with httpx.stream(
        "POST", pod.base_url + "/chat/completions", json=doc, headers=headers, timeout=30
    ) as resp:
        assert resp.headers["x-infercache-cache"] == "miss"


def test_upstream_500_on_a_stream_passes_through(pod: GatewayPod) -> None:
    """A stream request the model server refuses gets its status and body, uncached."""
    doc = body(unique("[[error]]"), stream=True)
    before = pod.upstream_calls()
    for _ in range(2):
        status, headers, raw = pod.post("/v1/chat/completions", doc)
        assert status == 500
        assert json.loads(raw) == {"error": {"message": "boom"}}
        assert headers["x-infercache-cache"] == "miss"
    assert pod.upstream_calls() == before + 2


def test_completions_stream_hit(pod: GatewayPod, sdk: openai.OpenAI) -> None:
    """/v1/completions streams are stored and replayed too."""
    prompt = unique("complete-stream")
    texts, outcomes = [], []
    for _ in range(2):
        raw = sdk.completions.with_raw_response.create(
            model=MODEL, prompt=prompt, temperature=0, stream=True
        )
        texts.append("".join(c.choices[0].text for c in raw.parse()))
        outcomes.append(raw.headers["x-infercache-cache"])
    assert outcomes == ["miss", "hit"]
    assert texts[0] == texts[1]
    assert texts[0].startswith("[v1] answer")
