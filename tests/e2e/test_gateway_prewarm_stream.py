"""Prewarm of streamed gateway traffic: a recorded `"stream": true` body is replayed to the
new weights, its SSE answer kept with the gateway's completeness rules and stored as the
gateway stores a streamed miss, so the gateway on v2 replays it as a hit chunk by chunk;
a stream the new upstream cuts or aborts stores nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod, gateway_pod_retaining, unsalted
from tests.support.processes import RedisServer
from tests.support.sidecars import run_cli

pytestmark = pytest.mark.e2e

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def chat(*messages: tuple[str, str], **kw: Any) -> dict[str, Any]:
    """SDK arguments of a chat completion at temperature 0."""
    msgs = [{"role": role, "content": content} for role, content in messages]
    return {"model": MODEL, "messages": msgs, "temperature": 0} | kw


# (endpoint, SDK arguments, hits on v1): streamed with a system prompt, with the usage
# chunk, with tools, a streamed text completion, and a whole answer; the hit counts
# decide the ranking.
TRAFFIC: dict[str, tuple[str, dict[str, Any], int]] = {
    "system": (
        "chat",
        chat(("system", "Answer as a pirate."), ("user", "Where is my order?"), stream=True),
        4,
    ),
    "usage": (
        "chat",
        chat(("user", "Count the words."), stream=True, stream_options={"include_usage": True}),
        3,
    ),
    "tools": ("chat", chat(("user", "Weather in Paris?"), tools=[TOOL], stream=True), 3),
    "completion": (
        "completions",
        {"model": MODEL, "prompt": "Once upon a time", "temperature": 0, "stream": True},
        2,
    ),
    "whole": ("chat", chat(("user", "How do I reset my password?")), 2),
}
# Stored as a stream on v1; asked for whole afterwards too (stream is not keyed). With
# its usage chunk: a whole answer reports usage, so a stream without one cannot serve it.
CROSS = chat(
    ("user", "Streamed first, then whole."), stream=True, stream_options={"include_usage": True}
)


def ask(client: openai.OpenAI, endpoint: str, args: dict[str, Any]) -> tuple[str, Any]:
    """(x-infercache-cache or "", the SDK-parsed answer without id and created: a list of
    chunks for a stream, one completion otherwise)."""
    return ask_raw(client, endpoint, args)[1:]


def ask_raw(client: openai.OpenAI, endpoint: str, args: dict[str, Any]) -> tuple[str, str, Any]:
    """(x-infercache-model-version, x-infercache-cache, answer) as `ask` reads them."""
    api: Any = client.chat.completions if endpoint == "chat" else client.completions
    raw = api.with_raw_response.create(**args)
    parsed = raw.parse()
    version = raw.headers.get("x-infercache-model-version", "")
    outcome = raw.headers.get("x-infercache-cache", "")
    if args.get("stream"):
        return version, outcome, [_answer(c.model_dump(exclude={"id", "created"})) for c in parsed]
    return version, outcome, _answer(parsed.model_dump(exclude={"id", "created"}))


def _answer(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` without usage.prompt_tokens_details, which a hit sets to say the whole prompt
    came from the cache (docs/gateway.md, cached-token accounting)."""
    if isinstance(doc.get("usage"), dict):
        doc["usage"].pop("prompt_tokens_details", None)
    return doc


def text_of(endpoint: str, answer: Any) -> str:
    """The answer's text (a stream's pieces joined)."""
    if isinstance(answer, list):
        key = "delta" if endpoint == "chat" else None
        parts = []
        for chunk in answer:
            for ch in chunk["choices"]:
                parts.append((ch[key]["content"] if key else ch["text"]) or "")
        return "".join(parts)
    ch = answer["choices"][0]
    return str(ch["message"]["content"] if endpoint == "chat" else ch["text"])


@pytest.fixture
def retaining_pod(redis_server: RedisServer, tmp_path: Path) -> Iterator[GatewayPod]:
    """A gateway pod recording acme's bodies; prewarm's payload setting is `text`, which
    must not matter for gateway records."""
    pod = gateway_pod_retaining(redis_server.url, tmp_path, prewarm_payload="text")
    yield pod
    pod.stop()


def switch_to_v2(pod: GatewayPod, stream_fault: str = "") -> str:
    """Stop the v1 sidecar (its hit counts merged), start the upstream on v2 weights and
    the sidecar on the new model files; v1's model version."""
    return pod.switch_to("v2", stream_fault=stream_fault)


def test_streamed_gateway_traffic_is_prewarmed_and_replayed_chunk_by_chunk(
    retaining_pod: GatewayPod,
) -> None:
    """v1 streamed (and whole) traffic, the pod switched to v2, prewarm from v1's ranking:
    v2 received v1's bodies byte for byte, every request is then a gateway HIT equal to
    what the v2 upstream answers those bodies (chunk by chunk for streams, JSON for the
    whole one; a stored stream answers a whole request with the same content), and the
    report counts the streamed items like the others."""
    pod = retaining_pod
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as gw:
        for endpoint, args, hits in TRAFFIC.values():
            v1, outcome, _ = ask_raw(gw, endpoint, args)
            assert outcome == "miss"
            for _ in range(hits):
                assert ask(gw, endpoint, args)[0] == "hit"
        assert ask(gw, "chat", CROSS)[0] == "miss"
        whole_cross = {k: v for k, v in CROSS.items() if k not in ("stream", "stream_options")}
        for _ in range(2):
            assert ask(gw, "chat", whole_cross)[0] == "hit"
    recorded = sorted(pod.upstream.stats()["bodies"])
    n = len(TRAFFIC) + 1
    assert len(recorded) == n

    admin = switch_to_v2(pod)
    requested = len(TRAFFIC) + 3  # more than the ranking holds: the report says so
    done = run_cli("prewarm", "--admin", admin, "--from-version", v1, "--top-k", str(requested))
    out = done.stdout + done.stderr
    assert done.returncode == 3, out  # fewer replayable than asked for (exit rules kept)
    assert f"{n} stored, 0 skipped, 0 failed of {n}" in out, out
    assert f"of {requested} requested: {n} available, {n} replayable, 0 not_replayable" in out
    assert sorted(pod.upstream.stats()["bodies"]) == recorded  # byte for byte

    # What the v2 upstream answers exactly those bodies (the SDK sends the same bytes).
    expected: dict[str, Any] = {}
    with openai.OpenAI(base_url=pod.upstream.url + "/v1", api_key="-", max_retries=0) as up:
        for name, (endpoint, args, _) in TRAFFIC.items():
            expected[name] = ask(up, endpoint, args)[1]
        expected["cross"] = ask(up, "chat", CROSS)[1]
        expected["cross-whole"] = ask(up, "chat", whole_cross)[1]
    bodies = pod.upstream.stats()["bodies"]
    # The gateway sent them with acme's cache_salt first; the SDK without it.
    assert sorted(bodies[n : 2 * n]) == sorted(unsalted(b) for b in recorded)

    calls = pod.upstream_calls()
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as gw:
        for name, (endpoint, args, _) in TRAFFIC.items():
            outcome, got = ask(gw, endpoint, args)
            assert outcome == "hit", name
            assert got == expected[name], name
            assert text_of(endpoint, got).startswith("[v2] answer"), name
        outcome, got = ask(gw, "chat", CROSS)
        assert (outcome, got) == ("hit", expected["cross"])
        outcome, got = ask(gw, "chat", whole_cross)
        assert outcome == "hit"
        assert text_of("chat", got) == text_of("chat", expected["cross-whole"])
        assert got["choices"][0]["finish_reason"] == "stop"
        assert got["model"] == MODEL
    assert pod.upstream_calls() == calls  # every one a hit: 0 recomputed, 0 wrong


# How the v2 upstream breaks every stream, and the reason prewarm reports for each.
INCOMPLETE = {"stream_incomplete"}
FAULTS = {
    "cut": INCOMPLETE,  # after the first chunk: no finish_reason, no [DONE]
    "no-done": INCOMPLETE,  # every chunk and the finish_reason, no [DONE]
    "mid-event": INCOMPLETE,  # half an event, then the connection closes
    # Reset after the first chunk: a read error, or a disconnect if the RST came first.
    "reset": {"upstream_error", "upstream_unreachable"},
}


def test_a_stream_the_upstream_breaks_during_prewarm_stores_nothing(
    retaining_pod: GatewayPod,
) -> None:
    """Whichever way the v2 upstream breaks a stream (FAULTS), the streamed item fails
    with its reason, nothing is stored (a lookup of its key misses at once: the item's
    single-flight hold was released), while the whole item is stored all the same; once
    the upstream streams whole, a prewarm stores the streamed one and the gateway
    replays it as a hit."""
    pod = retaining_pod
    streamed = chat(("user", "A streamed question."), stream=True)
    whole = chat(("user", "A whole question."))
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as gw:
        for args in (streamed, whole):
            assert [ask(gw, "chat", args)[0] for _ in range(3)] == ["miss", "hit", "hit"]
        v1 = ask_raw(gw, "chat", whole)[0]

    admin = switch_to_v2(pod)
    # The same key asked for whole (stream is not keyed), read but not stored.
    unstored = streamed | {"stream": False, "extra_headers": {"cache-control": "no-store"}}
    cli = ("--from-version", v1, "--top-k", "2", "--max-failures", "1", "--json")
    for i, (fault, reasons) in enumerate(FAULTS.items()):
        pod.upstream.start("v2", stream_fault=fault)
        done = run_cli("prewarm", "--admin", admin, *cli)
        assert done.returncode == 0, done.stdout + done.stderr  # one failure allowed
        summary = json.loads(done.stdout)
        # The whole item is stored by the first run, already cached in the others.
        counts = (summary.get("stored", 0), summary.get("skipped", 0), summary.get("failed"))
        assert counts == ((1, 0, 1) if i == 0 else (0, 1, 1)), (fault, summary)
        (reason,) = summary["failed_by_reason"]
        assert reason in reasons, (fault, summary)
        with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as gw:
            t0 = time.monotonic()
            assert ask(gw, "chat", unstored)[0] == "miss", fault  # nothing was stored
            # The failed item gave its single-flight hold back: no wait for the gateway's
            # 30 s wait_ms (nor the 60 s hold) on an answer that never comes.
            assert time.monotonic() - t0 < 15, fault

    pod.upstream.start("v2")  # whole streams again
    done = run_cli("prewarm", "--admin", admin, "--from-version", v1, "--top-k", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 stored, 1 skipped, 0 failed of 2" in done.stdout  # the whole one: cached
    with openai.OpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0) as gw:
        outcome, got = ask(gw, "chat", streamed)
        assert outcome == "hit"
        assert text_of("chat", got).startswith("[v2] answer")
        assert got[-1]["choices"][0]["finish_reason"] == "stop"
