"""Correctness probes run against both gateways: what each keeps apart, and whether a
cached stream replays the original SSE events in their original boundaries.

A probe sends request A (a fresh text each run, so nothing cached before counts), then
request B that differs in one thing that shapes the answer (or in who asks). B answered
from A's cache entry (verdict "hit") means the two were merged: for every probe here
that is a wrong answer. Anything else (miss, bypass) keeps them apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.gateway.load import Target, one, verdict

CHAT = "/v1/chat/completions"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def chat_body(text: str, *, system: str | None = None, **fields: Any) -> bytes:
    """A chat request for the bench's model (temperature 0 unless `fields` say otherwise)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    return json.dumps({"model": "tiny", "messages": messages, "temperature": 0} | fields).encode()


@dataclass(frozen=True, slots=True)
class Probe:
    """Two requests that must not share an answer: (target for A, body A, target for B,
    body B) built from a fresh text and the two callers' targets."""

    name: str
    build: Callable[[str, Target, Target], tuple[Target, bytes, Target, bytes]]


PROBES = (
    Probe("two_tenants_same_body", lambda t, a, b: (a, chat_body(t), b, chat_body(t))),
    Probe(
        "temperature_0_vs_0.7",
        lambda t, a, b: (a, chat_body(t), a, chat_body(t, temperature=0.7)),
    ),
    Probe("tools_vs_none", lambda t, a, b: (a, chat_body(t), a, chat_body(t, tools=[TOOL]))),
    Probe(
        "system_prompt_changed",
        lambda t, a, b: (a, chat_body(t, system="Be brief."), a, chat_body(t, system="Be kind.")),
    ),
)


async def run_probes(first: Target, second: Target) -> dict[str, str]:
    """Each probe's outcome for B: "apart" (correct) or "MERGED" (B got A's answer)."""
    out = {}
    for probe in PROBES:
        text = f"probe {probe.name} {uuid.uuid4().hex}"
        ta, a, tb, b = probe.build(text, first, second)
        await one(ta, a)
        await one(ta, a)  # twice: the entry is stored (and hot) before B asks
        answer = await one(tb, b)
        out[probe.name] = "MERGED" if verdict(answer.headers) == "hit" else "apart"
    return out


def sse_events(body: bytes) -> list[dict[str, Any] | str]:
    """The data payloads of an SSE body in order (JSON decoded, `[DONE]` as a string),
    comments and blank lines left out; one entry per event boundary."""
    events: list[dict[str, Any] | str] = []
    for block in body.decode("utf-8").split("\n\n"):
        data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if not data:
            continue
        payload = "\n".join(data)
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _without_fresh_fields(event: dict[str, Any] | str) -> dict[str, Any] | str:
    # A replay may give each chunk a fresh id and created (infercache does, documented).
    if isinstance(event, str):
        return event
    return {k: v for k, v in event.items() if k not in ("id", "created")}


@dataclass(frozen=True, slots=True)
class SseCheck:
    """A streamed request's first answer (the original) and its cached replay."""

    original_events: int
    replay_events: int
    replay_verdict: str
    exact: bool


async def sse_replay(target: Target) -> SseCheck:
    """Stream a fresh request twice; the replay is exact when it is a hit carrying the
    original's events, one for one, equal but for id and created."""
    body = chat_body(f"stream {uuid.uuid4().hex} please", stream=True)
    original = await one(target, body)
    replay = await one(target, body)
    a, b = sse_events(original.body), sse_events(replay.body)
    exact = verdict(replay.headers) == "hit" and [_without_fresh_fields(e) for e in a] == [
        _without_fresh_fields(e) for e in b
    ]
    return SseCheck(len(a), len(b), verdict(replay.headers), exact)


async def upstream_streams(target: Target) -> bool:
    """Whether the model server answers `stream: true` with SSE (older test servers did
    not), so the SSE check means something."""
    answer = await one(target, chat_body("do you stream?", stream=True))
    return answer.headers.get("content-type", "").startswith("text/event-stream")
