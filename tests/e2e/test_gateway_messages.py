"""The Anthropic Messages API through the gateway, driven by the official `anthropic` SDK
against the stand-in model server (vLLM's /v1/messages shapes): miss then hit with a
fresh id, streams replayed event by event, tenants apart, x-api-key, what is stored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod, unsalted
from tests.support.messages import events_of, messages_body, post_messages
from tests.support.readme import GATEWAY_ADDRESS, readme_gateway_example, run_example

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """One model server and one gateway for the module (prompts are unique per test)."""
    p = GatewayPod(model_server_model=MODEL)
    yield p
    p.stop()


_CLIENTS: dict[tuple[int, str], anthropic.Anthropic] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for c in _CLIENTS.values():
        c.close()
    _CLIENTS.clear()


def client(pod: GatewayPod, tenant: str = "acme") -> anthropic.Anthropic:
    """The SDK client of `tenant` (its key sent as x-api-key, as the SDK does)."""
    key = (pod.port, tenant)
    if key not in _CLIENTS:
        _CLIENTS[key] = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{pod.port}", api_key=API_KEYS[tenant], max_retries=0
        )
    return _CLIENTS[key]


def text_of(message: Any) -> str:
    """The text of a message's first block (asserted to be text)."""
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock), block
    return block.text


def unique(text: str = "hello") -> str:
    return f"{text} {uuid.uuid4().hex}"


def create(c: anthropic.Anthropic, content: str, **kw: Any) -> tuple[Any, dict[str, str]]:
    raw = c.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": content}], **kw
    )
    return raw.parse(), dict(raw.headers)


def test_messages_miss_then_hit_with_fresh_id(pod: GatewayPod) -> None:
    """The second identical request is a hit: the same content, a new msg_ id, and the
    whole prompt reported as read from cache."""
    c, prompt = client(pod), unique()
    before = pod.upstream_calls()
    # anthropic 2.x takes no sampling arguments of its own: vLLM still reads them.
    first, h1 = create(c, prompt, extra_body={"temperature": 0})
    second, h2 = create(c, prompt, extra_body={"temperature": 0})
    assert (h1["x-infercache-cache"], h2["x-infercache-cache"]) == ("miss", "hit")
    assert pod.upstream_calls() == before + 1
    assert text_of(second) == text_of(first)
    assert text_of(first).startswith("[v1] answer")
    assert first.id == "chatcmpl-test"
    assert second.id.startswith("msg_")
    assert second.id != first.id
    assert second.stop_reason == first.stop_reason == "end_turn"
    assert h1["x-infercache-key"] == h2["x-infercache-key"]
    # Accounting: a miss passes the model server's numbers; a hit read the whole prompt.
    assert first.usage.cache_read_input_tokens is None
    assert second.usage.input_tokens == 0
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.input_tokens > 0
    assert second.usage.output_tokens == first.usage.output_tokens


def test_messages_usage_passes_the_engines_cache_reads_through(pod: GatewayPod) -> None:
    """A miss reports vLLM's own cache_read_input_tokens; the hit reports the whole
    prompt (input_tokens + cache reads of the miss) as read, none as computed."""
    c, prompt = client(pod), unique("[[cached=2]] counted")
    first, _ = create(c, prompt)
    second, h2 = create(c, prompt)
    assert h2["x-infercache-cache"] == "hit"
    assert first.usage.cache_read_input_tokens == 2
    whole = first.usage.input_tokens + 2
    assert (second.usage.input_tokens, second.usage.cache_read_input_tokens) == (0, whole)


def test_messages_stream_with_the_sdk_then_hit(pod: GatewayPod) -> None:
    """messages.stream: a streamed miss, then the same text streamed from the cache."""
    c, prompt = client(pod), unique("streamed")
    texts, outcomes, ids = [], [], []
    for _ in range(2):
        with c.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
        ) as stream:
            texts.append("".join(stream.text_stream))
            final = stream.get_final_message()
            outcomes.append(stream.response.headers["x-infercache-cache"])
            ids.append(final.id)
    assert outcomes == ["miss", "hit"]
    assert texts[0] == texts[1]
    assert texts[0].startswith("[v1] answer")
    assert ids[1].startswith("msg_")
    assert ids[1] != ids[0]
    assert final.usage.input_tokens == 0
    assert final.usage.cache_read_input_tokens


def test_messages_stream_replayed_event_by_event(pod: GatewayPod) -> None:
    """A streamed hit sends the stored events one by one, at their boundaries: equal to
    the miss's but for message_start's id and the usage, one fresh id throughout."""
    body = messages_body(unique("[[ping]] replayed"), stream=True)
    s1, h1, miss = post_messages(pod, body)
    s2, h2, hit = post_messages(pod, body)
    assert (s1, s2, h1["x-infercache-cache"], h2["x-infercache-cache"]) == (
        200,
        200,
        "miss",
        "hit",
    )
    e1, e2 = events_of(miss), events_of(hit)
    assert [n for n, _ in e1] == [n for n, _ in e2]
    assert [n for n, _ in e1][:3] == ["message_start", "ping", "content_block_start"]
    assert [n for n, _ in e1][-2:] == ["message_delta", "message_stop"]
    for (name, d1), (_, d2) in zip(e1, e2, strict=True):
        if name == "message_start":
            assert d2["message"]["id"].startswith("msg_")
            assert d2["message"]["id"] != d1["message"]["id"]
            d1["message"].pop("id"), d2["message"].pop("id")
            d1["message"].pop("usage"), d2["message"].pop("usage")
        if name == "message_delta":
            assert d2["usage"]["input_tokens"] == 0
            d1.pop("usage"), d2.pop("usage")
        assert d1 == d2
    # Not renewed events are the stored bytes exactly.
    raw1 = [e for e in miss.split(b"\n\n") if b"content_block_delta" in e]
    raw2 = [e for e in hit.split(b"\n\n") if b"content_block_delta" in e]
    assert raw1 == raw2
    assert raw1


def test_messages_tenants_never_share(pod: GatewayPod) -> None:
    """The same request by two tenants is two misses (0 hits across tenants)."""
    prompt = unique("tenants")
    before = pod.upstream_calls()
    _, ha = create(client(pod, "acme"), prompt)
    _, hg = create(client(pod, "globex"), prompt)
    _, hg2 = create(client(pod, "globex"), prompt)
    assert (ha["x-infercache-cache"], hg["x-infercache-cache"]) == ("miss", "miss")
    assert hg2["x-infercache-cache"] == "hit"
    assert ha["x-infercache-key"] != hg["x-infercache-key"]
    assert pod.upstream_calls() == before + 2


def test_messages_forwarded_with_the_tenants_cache_salt(pod: GatewayPod) -> None:
    """vLLM's Messages API reads cache_salt: the gateway sends the tenant's own first."""
    since = len(pod.upstream.stats()["bodies"])
    body = messages_body(unique("salted"))
    post_messages(pod, body)
    [sent] = pod.upstream.stats()["bodies"][since:]
    assert json.loads(unsalted(sent)) == body


@pytest.mark.parametrize(
    ("marker", "stream"),
    [
        ("[[stop=null]]", False),
        ("[[stop=refusal]]", False),
        ("[[stop=pause_turn]]", True),
        ("[[error-event]]", True),
        ("[[wrong-model]]", False),
        ("[[wrong-model]]", True),
    ],
)
def test_messages_incomplete_answers_are_not_stored(
    pod: GatewayPod, marker: str, stream: bool
) -> None:
    """No stop reason of a complete answer, an error event, another model: forwarded,
    never stored (the same request again is a miss)."""
    body = messages_body(unique(marker), stream=stream)
    outcomes = [post_messages(pod, body)[1]["x-infercache-cache"] for _ in range(2)]
    assert outcomes == ["miss", "miss"]


def test_messages_stream_cut_is_not_stored_and_not_ended_cleanly(pod: GatewayPod) -> None:
    """A stream the model server ends before message_stop: the SDK raises, not stored."""
    c, prompt = client(pod), unique("[[cut]]")
    for _ in range(2):
        with (
            pytest.raises(anthropic.APIError),
            c.messages.stream(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
            ) as stream,
        ):
            stream.get_final_message()
    assert pod.upstream.stats()["prompts"].count(f"user: {prompt}") == 2


def test_messages_stored_stream_answers_a_whole_request_and_back(pod: GatewayPod) -> None:
    """`stream` is not keyed: a stored one-text-block stream answers a whole request and
    a stored body a streamed one, with the same text."""
    c, prompt = client(pod), unique("converted")
    with c.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        streamed = stream.get_final_message()
    whole, h = create(c, prompt)
    assert h["x-infercache-cache"] == "hit"
    assert text_of(whole) == text_of(streamed)
    assert whole.stop_reason == "end_turn"
    prompt = unique("converted back")
    first, _ = create(c, prompt)
    with c.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        again = stream.get_final_message()
        assert stream.response.headers["x-infercache-cache"] == "hit"
    assert text_of(again) == text_of(first)
    assert again.usage.cache_read_input_tokens == first.usage.input_tokens


def test_messages_tool_use_answer_is_not_converted(pod: GatewayPod) -> None:
    """A stored stream with a tool_use block is not turned into a body (vLLM orders the
    blocks otherwise there): the whole request is recomputed, then served alike."""
    body = messages_body(unique("[[tool]]"), stream=True)
    _, h1, _ = post_messages(pod, body)
    _, h2, whole = post_messages(pod, body | {"stream": False})
    _, h3, again = post_messages(pod, body | {"stream": False})
    outcomes = [h["x-infercache-cache"] for h in (h1, h2, h3)]
    assert outcomes == ["miss", "miss", "hit"]
    assert json.loads(again)["content"] == json.loads(whole)["content"]
    assert json.loads(again)["stop_reason"] == "tool_use"


def test_readme_anthropic_example(pod: GatewayPod, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's Anthropic example, pointed at this pod: a miss, then the same answer hit."""
    code = readme_gateway_example("anthropic").replace(GATEWAY_ADDRESS, f"127.0.0.1:{pod.port}")
    code = code.replace('"Hello"', f'"Hello {uuid.uuid4().hex}"')
    namespace = run_example(code)
    namespace["client"].close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["miss", "hit"]
    assert lines[0].split(" ", 1)[1] == lines[1].split(" ", 1)[1]
