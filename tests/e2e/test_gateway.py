"""The OpenAI gateway with the official SDK in front of the stand-in model server:
miss then hit, fresh ids, tenants from API keys only, keyed fields, refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.gateway import API_KEYS, MODEL, GatewayPod
from tests.support.readme import GATEWAY_ADDRESS, readme_gateway_example, run_example

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def pod() -> Iterator[GatewayPod]:
    """One model server and one gateway sidecar for the module (prompts are unique per test)."""
    p = GatewayPod(gateway_max_body_bytes=str(MAX_BODY))
    yield p
    p.stop()


_CLIENTS: dict[tuple[str, str], openai.OpenAI] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for c in _CLIENTS.values():
        c.close()
    _CLIENTS.clear()


def client(pod: GatewayPod, tenant: str = "acme") -> openai.OpenAI:
    """The module's SDK client of `tenant` (closed after the module)."""
    key = (pod.base_url, tenant)
    if key not in _CLIENTS:
        _CLIENTS[key] = openai.OpenAI(
            base_url=pod.base_url, api_key=API_KEYS[tenant], max_retries=0
        )
    return _CLIENTS[key]


def unique(text: str = "hello") -> str:
    return f"{text} {uuid.uuid4().hex}"


def chat(c: openai.OpenAI, content: str, **kw: Any) -> tuple[Any, dict[str, str]]:
    raw = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw
    )
    return raw.parse(), dict(raw.headers)


def test_chat_miss_then_hit_with_fresh_id(pod: GatewayPod) -> None:
    """The second identical chat request is a hit: same content, new id and created, Age set."""
    c, prompt = client(pod), unique()
    before = pod.upstream_calls()
    first, h1 = chat(c, prompt, temperature=0)
    second, h2 = chat(c, prompt, temperature=0)
    assert (h1["x-infercache-cache"], h2["x-infercache-cache"]) == ("miss", "hit")
    assert pod.upstream_calls() == before + 1
    assert second.choices[0].message.content == first.choices[0].message.content
    assert first.choices[0].message.content.startswith("[v1] answer")
    assert second.id != first.id
    assert second.id.startswith("chatcmpl-")
    assert second.created > 0
    assert first.created == 0
    assert first.usage is not None
    assert second.usage is not None
    # The answer's counts as computed; the whole prompt served from the cache.
    assert second.usage.model_dump(exclude={"prompt_tokens_details"}) == first.usage.model_dump(
        exclude={"prompt_tokens_details"}
    )
    assert first.usage.prompt_tokens_details is None  # the stand-in reports none
    assert second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens
    assert int(h2["age"]) >= 0
    assert h1["x-infercache-key"] == h2["x-infercache-key"]
    assert len(h2["x-infercache-key"]) == 16
    assert h2["x-infercache-model-version"].startswith("fp1-")


async def test_async_completions_miss_then_hit(pod: GatewayPod) -> None:
    """AsyncOpenAI: /v1/completions misses once, then hits with the same text."""
    c = openai.AsyncOpenAI(base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0)
    prompt = unique("complete")
    before = pod.upstream_calls()
    outcomes, texts = [], []
    for _ in range(2):
        raw = await c.completions.with_raw_response.create(
            model=MODEL, prompt=prompt, temperature=0, max_tokens=8
        )
        outcomes.append(raw.headers["x-infercache-cache"])
        texts.append(raw.parse().choices[0].text)
    await c.close()
    assert outcomes == ["miss", "hit"]
    assert texts[0] == texts[1]
    assert texts[0].startswith("[v1] answer")
    assert pod.upstream_calls() == before + 1


def test_embeddings_miss_then_hit(pod: GatewayPod) -> None:
    """/v1/embeddings: the second request is answered from the cache with the same vector."""
    c, text = client(pod), unique("embed me")
    before = pod.upstream_calls()
    raws = [c.embeddings.with_raw_response.create(model=MODEL, input=text) for _ in range(2)]
    assert [r.headers["x-infercache-cache"] for r in raws] == ["miss", "hit"]
    vectors = [r.parse().data[0].embedding for r in raws]
    assert vectors[0] == vectors[1]
    assert len(vectors[0]) == 8
    assert pod.upstream_calls() == before + 1


def test_models_proxied(pod: GatewayPod) -> None:
    """GET /v1/models lists what the model server serves."""
    assert [m.id for m in client(pod).models.list()] == [MODEL]


def test_same_body_two_tenants_never_share(pod: GatewayPod) -> None:
    """One body under two API keys is two tenants: each misses once, no shared answer."""
    prompt = unique("shared?")
    before = pod.upstream_calls()
    _, a = chat(client(pod, "acme"), prompt, temperature=0)
    _, g = chat(client(pod, "globex"), prompt, temperature=0)
    _, a2 = chat(client(pod, "acme"), prompt, temperature=0)
    assert (a["x-infercache-cache"], g["x-infercache-cache"]) == ("miss", "miss")
    assert a2["x-infercache-cache"] == "hit"
    assert a["x-infercache-key"] != g["x-infercache-key"]
    assert pod.upstream_calls() == before + 2


def test_missing_or_unknown_key_is_401(pod: GatewayPod) -> None:
    """No key, an unknown key, or a tenant header (not configured as trusted) -> 401."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": unique()}]}
    for headers in (
        {},
        {"authorization": "Bearer sk-nobody-0123456789abcdef"},
        {"x-tenant": "acme"},
    ):
        status, _, raw = pod.post("/v1/chat/completions", body, headers, tenant="")
        assert status == 401, raw
        assert json.loads(raw)["error"]["type"] == "authentication_error"
    with (
        openai.OpenAI(base_url=pod.base_url, api_key="sk-wrong-0123456789abcd") as wrong,
        pytest.raises(openai.AuthenticationError),
    ):
        wrong.models.list()


BASE: dict[str, Any] = {"temperature": 0}
VARIANTS: dict[str, dict[str, Any]] = {
    "temperature": {"temperature": 0.7},
    "tools": {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    },
    "seed": {"seed": 7},
    "max_tokens": {"max_tokens": 5},
    "vllm_top_k": {"extra_body": {"top_k": 3}},
    "unknown_field": {"extra_body": {"brand_new_knob": 1}},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_keyed_field_change_misses(pod: GatewayPod, name: str) -> None:
    """A change of any keyed field (or an unknown one) is a different request: MISS."""
    c, prompt = client(pod), unique(name)
    before = pod.upstream_calls()
    _, h1 = chat(c, prompt, **BASE)
    _, h2 = chat(c, prompt, **(BASE | VARIANTS[name]))
    _, h3 = chat(c, prompt, **(BASE | VARIANTS[name]))
    assert (h1["x-infercache-cache"], h2["x-infercache-cache"]) == ("miss", "miss")
    assert h3["x-infercache-cache"] == "hit"
    assert h1["x-infercache-key"] != h2["x-infercache-key"]
    assert pod.upstream_calls() == before + 2
    if name == "unknown_field":
        assert h2["x-infercache-unknown-fields"] == "brand_new_knob"
        assert "x-infercache-unknown-fields" not in h1


def test_system_prompt_and_lookalike_unicode_keep_apart(pod: GatewayPod) -> None:
    """A different system prompt, or K vs KELVIN SIGN, is never the same request."""
    c, tag = client(pod), uuid.uuid4().hex
    before = pod.upstream_calls()
    keys = set()
    conversations: list[Any] = [
        [{"role": "user", "content": f"Key-corp {tag}"}],
        [{"role": "user", "content": f"\u212aey-corp {tag}"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"Key-corp {tag}"}],
        [{"role": "system", "content": "be long"}, {"role": "user", "content": f"Key-corp {tag}"}],
    ]
    for messages in conversations:
        raw = c.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, temperature=0
        )
        assert raw.headers["x-infercache-cache"] == "miss"
        keys.add(raw.headers["x-infercache-key"])
    assert len(keys) == 4
    assert pod.upstream_calls() == before + 4


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, "body"),
        (
            b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
            b'"temperature": NaN}',
            400,
            None,
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
            400,
            "temperature",
        ),
        ({"model": MODEL}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "\ud800"}]}, 400, None),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x" * MAX_BODY}]}, 413, None),
    ],
    ids=[
        "malformed",
        "not-object",
        "nan",
        "wrong-type",
        "no-messages",
        "no-model",
        "surrogate",
        "too-large",
    ],
)
def test_bad_requests_are_4xx_openai_errors(
    pod: GatewayPod, body: Any, status: int, param: str | None
) -> None:
    """Malformed JSON, wrong types, lone surrogates and oversized bodies: 400/413, never 500."""
    before = pod.upstream_calls()
    code, _headers, raw = pod.post("/v1/chat/completions", body)
    assert code == status, raw
    error = json.loads(raw)["error"]
    assert error["message"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    assert pod.upstream_calls() == before


def test_upstream_500_passes_through_and_is_not_stored(pod: GatewayPod) -> None:
    """A 5xx from the model server reaches the client as it was and is never cached."""
    c, prompt = client(pod), unique("[[error]]")
    before = pod.upstream_calls()
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as exc:
            chat(c, prompt, temperature=0)
        assert exc.value.response.headers["x-infercache-cache"] == "miss"
        assert exc.value.body == {"message": "boom"}
    assert pod.upstream_calls() == before + 2


def test_wrong_model_answer_is_not_stored(pod: GatewayPod) -> None:
    """An answer naming another model than asked for is passed on but not cached."""
    c, prompt = client(pod), unique("[[wrong-model]]")
    before = pod.upstream_calls()
    outcomes = [chat(c, prompt, temperature=0)[1]["x-infercache-cache"] for _ in range(2)]
    assert outcomes == ["miss", "miss"]
    assert pod.upstream_calls() == before + 2


def test_remote_image_is_bypassed(pod: GatewayPod) -> None:
    """An image the model server would fetch cannot be keyed by its bytes: never cached."""
    content = [
        {"type": "text", "text": unique("what is this")},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
    ]
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    before = pod.upstream_calls()
    for _ in range(2):
        status, headers, _ = pod.post("/v1/chat/completions", body)
        assert status == 200
        assert headers["x-infercache-cache"] == "bypass"
        assert "fetched" in headers["x-infercache-bypass-reason"]
    assert pod.upstream_calls() == before + 2


def test_readme_gateway_example(pod: GatewayPod, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's OpenAI example, pointed at this pod: for each API it calls (chat
    completions, then Responses), a miss, then the same answer hit."""
    code = readme_gateway_example().replace(GATEWAY_ADDRESS, f"127.0.0.1:{pod.port}")
    code = code.replace('"Hello"', f'"Hello {uuid.uuid4().hex}"')
    namespace = run_example(code)
    namespace["client"].close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["miss", "hit"] * 2
    for miss, hit in zip(lines[::2], lines[1::2], strict=True):
        assert miss.split(" ", 1)[1] == hit.split(" ", 1)[1]


def test_on_uvloop_as_served_bodies_and_streams_go_through() -> None:
    """`infercache serve` runs on uvloop (the tests' sidecars do not): misses over kept
    upstream connections, a hit, and a streamed miss replayed as a hit, on uvloop."""
    p = GatewayPod(uvloop="true")
    try:
        c = openai.OpenAI(base_url=p.base_url, api_key=API_KEYS["acme"], max_retries=0)
        try:
            prompts = [unique("on uvloop") for _ in range(3)]
            firsts = [chat(c, q, temperature=0) for q in prompts]
            assert [h["x-infercache-cache"] for _, h in firsts] == ["miss"] * 3
            again, h = chat(c, prompts[0], temperature=0)
            assert h["x-infercache-cache"] == "hit"
            assert again.choices[0].message.content == firsts[0][0].choices[0].message.content
            q = unique("streamed on uvloop")
            streamed = []
            for _ in range(2):
                with c.chat.completions.with_streaming_response.create(
                    model=MODEL, messages=[{"role": "user", "content": q}], stream=True
                ) as resp:
                    verdict = resp.headers["x-infercache-cache"]
                    text = "".join(
                        ch.choices[0].delta.content or "" for ch in resp.parse() if ch.choices
                    )
                streamed.append((verdict, text))
            assert [v for v, _ in streamed] == ["miss", "hit"]
            assert streamed[0][1] == streamed[1][1] != ""
            assert p.upstream_calls() == 4
        finally:
            c.close()
    finally:
        p.stop()
