"""POST /v1/responses through the gateway with the official `openai` SDK (sync and async,
streamed and not): hits with fresh ids, streamed hits replayed event by event, the
cached-token accounting, tenants apart, and requests that must not be cached."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod, unsalted

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    p = GatewayPod()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def sdk(pod: GatewayPod) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as c:
        yield c


def unique(text: str = "resp") -> str:
    return f"{text} {uuid.uuid4().hex}"


def body(prompt: str, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": prompt, "temperature": 0} | kw


def raw_events(pod: GatewayPod, doc: dict[str, Any]) -> tuple[str, list[bytes]]:
    """(x-infercache-cache, the SSE events exactly as received, split at blank lines)."""
    headers = {"authorization": f"Bearer {API_KEYS['acme']}"}
    with httpx.stream(
        "POST", pod.base_url + "/responses", json=doc | {"stream": True}, headers=headers
    ) as resp:
        assert resp.status_code == 200, resp.read()
        data = resp.read()
        outcome = resp.headers["x-infercache-cache"]
    return outcome, [e + b"\n\n" for e in data.split(b"\n\n") if e]


def parsed(event: bytes) -> tuple[str, dict[str, Any]]:
    """(the `event:` line's type, the data's JSON)."""
    head, data = event.split(b"\n", 1)
    assert head.startswith(b"event: ")
    assert data.startswith(b"data: ")
    return head[len(b"event: ") :].decode(), json.loads(data[len(b"data: ") :])


def renewed_values(doc: Any, found: dict[str, set[Any]]) -> Any:
    """`doc` with the values a hit renews (ids, created_at, cached_tokens) taken out and
    collected into `found`."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in ("id", "item_id", "created_at", "cached_tokens"):
                found.setdefault(k, set()).add(v)
            else:
                out[k] = renewed_values(v, found)
        return out
    if isinstance(doc, list):
        return [renewed_values(x, found) for x in doc]
    return doc


def test_sdk_whole_answer_hit_has_fresh_ids_and_counts_the_prompt_as_cached(
    pod: GatewayPod, sdk: openai.OpenAI
) -> None:
    """responses.create twice: the second is a hit with the same output text, a fresh
    resp_ id and item id, and usage saying the whole prompt came from the cache (a
    miss passes the engine's cached_tokens through)."""
    prompt = unique()
    calls = pod.upstream_calls()
    first = sdk.responses.with_raw_response.create(model=MODEL, input=prompt, temperature=0)
    second = sdk.responses.with_raw_response.create(model=MODEL, input=prompt, temperature=0)
    assert first.headers["x-infercache-cache"] == "miss"
    assert second.headers["x-infercache-cache"] == "hit"
    assert pod.upstream_calls() == calls + 1
    a, b = first.parse(), second.parse()
    assert a.output_text == b.output_text
    assert a.output_text.startswith("[v1] answer")
    assert b.id.startswith("resp_")
    assert b.id != a.id
    hit_item, miss_item = b.output[0], a.output[0]
    assert hit_item.type == miss_item.type == "message"
    assert hit_item.id.startswith("msg_")
    assert hit_item.id != miss_item.id
    assert b.created_at >= a.created_at
    assert a.usage is not None
    assert b.usage is not None
    words = a.usage.input_tokens
    assert a.usage.input_tokens_details.cached_tokens == words // 2  # the engine's own
    assert b.usage.input_tokens_details.cached_tokens == b.usage.input_tokens == words
    assert b.usage.output_tokens == a.usage.output_tokens


def test_sdk_streamed_hit_replays_every_event(pod: GatewayPod, sdk: openai.OpenAI) -> None:
    """A streamed responses.create twice: the hit sends the same event types in the same
    order with the same sequence numbers and deltas; its ids are fresh and the same
    across its events."""
    prompt = unique("stream")
    runs = []
    for _ in range(2):
        raw = sdk.responses.with_raw_response.create(
            model=MODEL, input=prompt, temperature=0, stream=True
        )
        runs.append((raw.headers["x-infercache-cache"], list(raw.parse())))
    (o1, miss), (o2, hit) = runs
    assert (o1, o2) == ("miss", "hit")
    assert [e.type for e in hit] == [e.type for e in miss]
    assert [e.sequence_number for e in hit] == list(range(len(miss)))
    assert hit[0].type == "response.created"
    assert hit[-1].type == "response.completed"
    deltas = [e.delta for e in hit if e.type == "response.output_text.delta"]
    assert deltas == [e.delta for e in miss if e.type == "response.output_text.delta"]
    assert len(deltas) > 1
    ids = {e.response.id for e in hit if hasattr(e, "response")}
    assert len(ids) == 1
    assert ids.isdisjoint({e.response.id for e in miss if hasattr(e, "response")})
    items = {e.item_id for e in hit if hasattr(e, "item_id")}
    assert len(items) == 1
    assert items == {hit[-1].response.output[0].id}
    assert hit[-1].response.usage is not None
    assert hit[-1].response.usage.input_tokens_details.cached_tokens == (
        hit[-1].response.usage.input_tokens
    )


def test_async_sdk_streamed_and_not(pod: GatewayPod) -> None:
    """The async client: a whole answer and a stream, each a miss then a hit."""

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0
        ) as client:
            outcomes = []
            prompt = unique("async")
            for _ in range(2):
                raw = await client.responses.with_raw_response.create(model=MODEL, input=prompt)
                outcomes.append(raw.headers["x-infercache-cache"])
                assert raw.parse().output_text.startswith("[v1] answer")
            prompt = unique("async-stream")
            for _ in range(2):
                streamed = await client.responses.with_raw_response.create(
                    model=MODEL, input=prompt, stream=True
                )
                outcomes.append(streamed.headers["x-infercache-cache"])
                events = [e async for e in streamed.parse()]
                assert events[-1].type == "response.completed"
            return outcomes

    assert asyncio.run(run()) == ["miss", "hit", "miss", "hit"]


def test_raw_sse_replay_is_equal_event_by_event(pod: GatewayPod) -> None:
    """The replayed events, as bytes on the wire: the same count, `event:` lines and
    data, but for the renewed values, which are consistent within the replay."""
    doc = body(unique("raw"))
    o1, miss = raw_events(pod, doc)
    o2, hit = raw_events(pod, doc)
    assert (o1, o2) == ("miss", "hit")
    assert len(hit) == len(miss)
    renewed: dict[str, set[Any]] = {}
    original: dict[str, set[Any]] = {}
    for h, m in zip(hit, miss, strict=True):
        (ht, hd), (mt, md) = parsed(h), parsed(m)
        assert ht == mt == hd["type"]
        assert renewed_values(hd, renewed) == renewed_values(md, original)
    assert len(renewed["created_at"]) == 1
    assert renewed["id"].isdisjoint(original["id"])
    assert renewed["item_id"] <= renewed["id"]  # the item's fresh id, wherever it appears
    # Events without a renewed value are sent byte for byte.
    same = [h for h, m in zip(hit, miss, strict=True) if b"delta" in h]
    assert same
    assert all(b'"item_id"' in h for h in same)


def test_a_stored_stream_answers_a_whole_request_and_not_the_reverse(pod: GatewayPod) -> None:
    """A stream's response.completed object answers a request that does not stream; a
    stored whole answer cannot answer a stream exactly, so that is recomputed."""
    doc = body(unique("convert"))
    assert raw_events(pod, doc)[0] == "miss"
    status, headers, raw = pod.post("/v1/responses", doc)
    assert status == 200
    assert headers["x-infercache-cache"] == "hit"
    got = json.loads(raw)
    assert got["object"] == "response"
    assert got["status"] == "completed"
    assert got["output"][0]["content"][0]["text"].startswith("[v1] answer")

    doc = body(unique("convert-back"))
    assert pod.post("/v1/responses", doc)[1]["x-infercache-cache"] == "miss"
    assert raw_events(pod, doc)[0] == "miss"  # recomputed, stored as a stream
    assert raw_events(pod, doc)[0] == "hit"


def test_cross_tenant_first_request_is_a_miss(pod: GatewayPod) -> None:
    """Four probes of other tenants' stored answers: 0 hits."""
    hits = 0
    for i in range(4):
        doc = body(unique(f"xt{i}"))
        pod.post("/v1/responses", doc)
        hits += pod.post("/v1/responses", doc, tenant="globex")[1]["x-infercache-cache"] == "hit"
    assert hits == 0


FIELD_PROBES: list[dict[str, Any]] = [
    {"instructions": "be brief"},
    {"instructions": None},
    {"input": [{"role": "user", "content": "PROMPT"}]},
    {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]},
    {"tool_choice": "none"},
    {"parallel_tool_calls": False},
    {"text": {"format": {"type": "json_object"}}},
    {"reasoning": {"effort": "low"}},
    {"max_output_tokens": 64},
    {"temperature": 0.7},
    {"temperature": None},
    {"top_p": 0.5},
    {"truncation": "auto"},
    {"include": ["message.output_text.logprobs"]},
    {"metadata": {"k": "v"}},
    {"user": "someone"},
    {"a_field_from_the_future": True},
]


def test_each_output_shaping_field_separates(pod: GatewayPod) -> None:
    """Field probes: with the base request stored, each variant is a miss (never the
    base's answer), and then a hit of its own (it is cached, not bypassed)."""
    prompt = unique("probe")
    base = body(prompt)
    assert pod.post("/v1/responses", base)[1]["x-infercache-cache"] == "miss"
    wrong = []
    for change in FIELD_PROBES:
        doc = base | json.loads(json.dumps(change).replace("PROMPT", prompt))
        outcomes = [pod.post("/v1/responses", doc)[1]["x-infercache-cache"] for _ in range(2)]
        if outcomes != ["miss", "hit"]:
            wrong.append((change, outcomes))
    assert not wrong


def test_unknown_fields_are_reported(pod: GatewayPod) -> None:
    """A field the gateway does not know is named in x-infercache-unknown-fields."""
    _, headers, _ = pod.post("/v1/responses", body(unique(), zz_new=1))
    assert headers["x-infercache-unknown-fields"] == "zz_new"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"background": True}, "background"),
        ({"conversation": "conv_123"}, "conversation"),
        ({"store": True}, "store"),
    ],
)
def test_stateful_requests_are_forwarded_uncached(
    pod: GatewayPod, change: dict[str, Any], reason: str
) -> None:
    """Requests that depend on the model server's stored state: bypass, with a reason,
    and the model server asked every time."""
    doc = body(unique("state"), **change)
    calls = pod.upstream_calls()
    for _ in range(2):
        status, headers, _ = pod.post("/v1/responses", doc)
        assert status == 200
        assert headers["x-infercache-cache"] == "bypass"
        assert reason in headers["x-infercache-bypass-reason"]
    assert pod.upstream_calls() == calls + 2


def test_incomplete_answers_are_never_stored(pod: GatewayPod) -> None:
    """status incomplete (max_output_tokens), a stream with an error event, a stream
    cut before response.completed: each asked twice reaches the model server twice."""
    doc = body(unique("[[finish=length]]"))
    assert [pod.post("/v1/responses", doc)[1]["x-infercache-cache"] for _ in range(2)] == [
        "miss",
        "miss",
    ]
    doc = body(unique("[[error-event]]"))
    assert [raw_events(pod, doc)[0] for _ in range(2)] == ["miss", "miss"]
    doc = body(unique("[[cut]]"))
    for _ in range(2):
        with pytest.raises(httpx.RemoteProtocolError):
            raw_events(pod, doc)


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (json.dumps({"model": MODEL, "input": 5}).encode(), "input"),
        (json.dumps({"model": MODEL}).encode(), "input"),
        (json.dumps({"model": MODEL, "input": "x", "temperature": "hot"}).encode(), "temperature"),
        (
            json.dumps({"model": MODEL, "input": "x", "max_output_tokens": "a"}).encode(),
            "max_output_tokens",
        ),
        (
            json.dumps({"model": MODEL, "input": [{"role": 1, "content": "x"}]}).encode(),
            "input[0].role",
        ),
        (json.dumps({"input": "x"}).encode(), "model"),
    ],
)
def test_bad_input_is_an_openai_style_400(pod: GatewayPod, raw: bytes, param: str | None) -> None:
    """Refused before the model server, in OpenAI's error format, never a 5xx."""
    calls = pod.upstream_calls()
    status, _, data = pod.post("/v1/responses", raw)
    assert status == 400, data
    error = json.loads(data)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert pod.upstream_calls() == calls


def test_each_tenant_salt_reaches_the_model_server(pod: GatewayPod) -> None:
    """vLLM salts /v1/responses too: the forwarded body carries the tenant's cache_salt
    first, the client's body otherwise byte for byte."""
    doc = body(unique("salt"))
    sent = json.dumps(doc)
    pod.post("/v1/responses", sent.encode())
    bodies = pod.upstream.stats()["bodies"]
    assert unsalted(bodies[-1]) == sent


def test_a_function_call_answer_is_replayed_with_fresh_item_ids(pod: GatewayPod) -> None:
    """A streamed function_call answer: the hit's fc_ id is fresh and the same in every
    event naming it; its call_id is the original's (the client answers it by call_id)."""
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    doc = body(unique("[[call]]"), tools=tools)
    (o1, miss), (o2, hit) = raw_events(pod, doc), raw_events(pod, doc)
    assert (o1, o2) == ("miss", "hit")
    first, again = parsed(miss[-1])[1]["response"], parsed(hit[-1])[1]["response"]
    call, replayed = first["output"][0], again["output"][0]
    assert replayed["type"] == "function_call"
    assert replayed["id"].startswith("fc_")
    assert replayed["id"] != call["id"]
    assert replayed["call_id"] == call["call_id"]
    named = {parsed(e)[1].get("item_id") for e in hit} - {None}
    assert named == {replayed["id"]}
    status, _, whole = pod.post("/v1/responses", doc)
    assert status == 200
    assert json.loads(whole)["output"][0]["arguments"] == call["arguments"]
