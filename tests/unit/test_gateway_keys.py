"""The gateway's pure parts: request bodies as keys, cache controls, SSE completeness,
hit rendering, and the hit record's key bytes (no sockets)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.api.cache_codec import key_request_from_record
from sidecar.api.key_encode import record_key_bytes
from sidecar.gateway.controls import CacheMode, controls
from sidecar.gateway.errors import HttpError, for_wire
from sidecar.keys import build_key
from sidecar.wire.errors import WireError
from sidecar.wire.openai.keys import CHAT, COMPLETIONS, EMBEDDINGS, keyed_request
from sidecar.wire.openai.render import Renewal, body_from_events, events_from_body, replay_events
from sidecar.wire.openai.sse import EventSplitter, StreamWatch

FP = "fp1-test"
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def chat_body(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]} | kw


def digest(endpoint: str, body: dict[str, Any], tenant: str = "acme", pv: str = "p1") -> bytes:
    kr = keyed_request(endpoint, body, tenant, pv)
    assert kr.key is not None, kr.uncacheable
    return build_key(kr.key, default_model_version=FP).digest


def test_transport_fields_do_not_change_the_key() -> None:
    """stream, stream_options, user, metadata, request ids: same key. (priority and
    cache_salt were here until 2026-12-02: they are keyed now, see
    test_gateway_vllm_fields.py.)"""
    base = digest(CHAT, chat_body(temperature=0))
    for extra in (
        {"stream": True},
        {"stream_options": {"include_usage": True}, "stream": True},
        {"user": "u1", "metadata": {"a": "b"}, "store": True},
        {"request_id": "r1", "service_tier": "flex"},
    ):
        assert digest(CHAT, chat_body(temperature=0, **extra)) == base, extra


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.5},
        {"top_p": 0.9},
        {"seed": 1},
        {"stop": "x"},
        {"tools": [TOOL]},
        {"tool_choice": "auto"},
        {"response_format": {"type": "json_object"}},
        {"top_k": -1},
        {"repetition_penalty": 1.0},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"brand_new_field": 1},
        {"model": "other"},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "h\u0131"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"messages": [{"role": "user", "content": "hi", "name": ""}]},
        {"messages": [{"role": "user", "content": None}]},
    ],
    ids=lambda c: ",".join(c),
)
def test_any_keyed_change_is_a_new_key(change: dict[str, Any]) -> None:
    """Every output-shaping field, unknown ones included, changes the key."""
    assert digest(CHAT, chat_body(temperature=0) | change) != digest(CHAT, chat_body(temperature=0))


def test_tenant_prompt_version_and_endpoint_keep_apart() -> None:
    """Same body: another tenant, prompt version or endpoint is another key."""
    body = {"model": "tiny", "prompt": "hi", "input": "hi"}
    keys = {
        digest(COMPLETIONS, body),
        digest(COMPLETIONS, body, tenant="globex"),
        digest(COMPLETIONS, body, pv="p2"),
        digest(EMBEDDINGS, body),
    }
    assert len(keys) == 4


def test_unknown_fields_are_reported() -> None:
    """Fields outside the table are named in `unknown`; known extra-rule fields are not."""
    kr = keyed_request(CHAT, chat_body(zeta=1, alpha={"x": 1}, vllm_xargs={"k": 1}), "a", "p")
    assert kr.unknown == ("alpha", "zeta")
    assert kr.key is not None
    assert kr.key.extra["alpha"] == '{"x":1}'
    assert kr.key.extra["vllm_xargs"] == '{"k":1}'


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat_body(temperature="hot"), "temperature"),
        (chat_body(n=True), "n"),
        (chat_body(stop=[1]), "stop"),
        (chat_body(messages=[]), "messages"),
        (chat_body(messages=[{"content": "x"}]), "messages[0].role"),
        (chat_body(logit_bias={"abc": 1}), "logit_bias"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
def test_wrong_types_are_400(body: dict[str, Any], param: str) -> None:
    """A wrong type is a WireError naming the field, answered as a 400 naming it."""
    with pytest.raises(WireError) as exc:
        keyed_request(CHAT, body, "acme", "p1")
    assert exc.value.field == param
    answer = for_wire(exc.value)
    assert (answer.status, answer.param, answer.code) == (400, param, "invalid_value")


def test_remote_media_and_batches_are_uncacheable() -> None:
    """Media fetched by URL and several inputs at once are forwarded uncached."""
    url_part = {"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}}
    for endpoint, body in (
        (CHAT, chat_body(messages=[{"role": "user", "content": [url_part]}])),
        (COMPLETIONS, {"model": "tiny", "prompt": ["a", "b"]}),
        (EMBEDDINGS, {"model": "tiny", "input": ["a", "b"]}),
    ):
        kr = keyed_request(endpoint, body, "acme", "p1")
        assert kr.key is None
        assert kr.uncacheable


def test_inline_image_is_keyed_by_its_bytes() -> None:
    """A data: URL image is keyed by the digest of its decoded bytes (and detail)."""
    part = {"type": "image_url", "image_url": {"url": IMAGE}}
    low = {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}}
    a = digest(CHAT, chat_body(messages=[{"role": "user", "content": [part]}]))
    b = digest(CHAT, chat_body(messages=[{"role": "user", "content": [low]}]))
    assert a != b


@pytest.mark.parametrize(
    "body",
    [
        chat_body(temperature=0, tools=[TOOL], tool_choice={"type": "function"}, seed=3),
        chat_body(
            messages=[
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "a"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
            logit_bias={"5": -1},
            stop=["a", "b"],
            guided_choice=["x", "y"],
            chat_template_kwargs={"k": 1},
            modalities=["text"],
            unknown_thing=[1, 2],
        ),
    ],
)
def test_record_key_round_trips(body: dict[str, Any]) -> None:
    """A hit record's key bytes decode to a request with the same key (prewarm replays it)."""
    kr = keyed_request(CHAT, body, "acme", "p1")
    assert kr.key is not None
    decoded = key_request_from_record(record_key_bytes(kr.key))
    assert decoded.model_version == ""
    assert build_key(decoded, default_model_version=FP) == build_key(
        kr.key, default_model_version=FP
    )


def test_cache_control_and_modes() -> None:
    """no-cache skips reads, no-store skips writes, max-age bounds age, modes combine."""
    rw = CacheMode.READ_WRITE
    assert controls({}, rw) == controls({b"cache-control": b"public"}, rw)
    c = controls({b"cache-control": b"no-cache, max-age=60"}, rw)
    assert (c.read, c.write, c.max_age_s) == (False, True, 60)
    assert not controls({b"cache-control": b"no-store"}, rw).write
    assert not controls({b"cache-control": b"max-age=0"}, rw).read
    assert controls({b"x-infercache-cache-mode": b"off"}, rw).off
    assert controls({}, CacheMode.OFF).off
    ro = controls({b"x-infercache-cache-mode": b"Read-Only"}, rw)
    assert (ro.read, ro.write) == (True, False)
    with pytest.raises(HttpError):
        controls({b"cache-control": b"max-age=-1"}, rw)


def sse(doc: Any) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


CHUNKS = [
    {
        "id": "x",
        "created": 5,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "a"}, "finish_reason": None}
        ],
    },
    {
        "id": "x",
        "created": 5,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}],
    },
]


def test_stream_watch_needs_finish_and_done() -> None:
    """Complete only with every choice finished and [DONE]; split events survive any cut."""
    data = b"".join(sse(c) for c in CHUNKS) + b"data: [DONE]\n\n"
    for cut in range(1, len(data)):
        splitter, watch = EventSplitter(1 << 20), StreamWatch()
        for piece in (data[:cut], data[cut:]):
            for event in splitter.feed(piece):
                watch.see(event)
        assert watch.complete, cut
    cases: dict[str, bytes] = {
        "no done": b"".join(sse(c) for c in CHUNKS),
        "no finish": sse(CHUNKS[0]) + b"data: [DONE]\n\n",
        "error": sse(CHUNKS[0])
        + sse({"error": {"message": "x"}})
        + sse(CHUNKS[1])
        + b"data: [DONE]\n\n",
    }
    for name, stream in cases.items():
        splitter, watch = EventSplitter(1 << 20), StreamWatch()
        for event in splitter.feed(stream):
            watch.see(event)
        assert not watch.complete, name


def test_rendering_renews_and_converts() -> None:
    """Events keep their bytes but id/created; stream <-> whole answer conversions agree."""
    events = [sse(c) for c in CHUNKS]
    renewal = Renewal(CHAT)
    replayed = replay_events(events, False, renewal)
    assert replayed is not None
    for old, new in zip(events, replayed, strict=True):
        assert new is not None
        assert json.loads(new[6:])["id"] == renewal.new_id.decode()
        assert json.loads(new[6:])["choices"] == json.loads(old[6:])["choices"]
    assert replay_events(events, True, renewal) is None  # usage asked, none stored
    # A whole answer always has its usage: a stream without its usage chunk cannot make
    # one (since 2026-12-02; it was joined without usage before).
    assert body_from_events(events, CHAT, renewal) is None
    usage = {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    with_usage = [*events, sse({"id": "c1", "created": 1, "choices": [], "usage": usage})]
    whole = body_from_events(with_usage, CHAT, renewal)
    assert whole is not None
    doc = json.loads(whole)
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": "ab"}
    assert doc["choices"][0]["finish_reason"] == "stop"
    # A hit reports the whole prompt as served from the cache (issue 27 item 4).
    assert doc["usage"] == usage | {"prompt_tokens_details": {"cached_tokens": 2}}
    back = events_from_body(whole, CHAT, False, renewal)
    assert back is not None
    assert json.loads(back[0][6:])["choices"][0]["delta"]["content"] == "ab"


# --- found by review (2026-12-01): requests that keyed alike but are not the same ------


def chat_of(*messages: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": list(messages)} | kw


USER = {"role": "user", "content": "describe"}
AUDIO_PART = {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,AAAA"}}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # A message's leftovers against a top-level field named like the JSON path that
        # once held them in `extra`.
        (chat_of(USER | {"name": ""}), chat_of(USER, **{"messages[0].name": '""'})),
        (chat_of(USER | {"name": ""}), chat_of(USER, **{"messages[0].name": ""})),
        (chat_of(USER | {"foo": 1}), chat_of(USER, **{"messages[0].foo": 1})),
        (
            chat_of({"role": "user", "content": [{"type": "text", "text": "d"}, AUDIO_PART]}),
            chat_of(
                {"role": "user", "content": [{"type": "text", "text": "d"}]},
                **{"messages[0].content[1]": AUDIO_PART},
            ),
        ),
        # ... and against one another: a message field named like a part's path.
        (
            chat_of({"role": "user", "content": [{"type": "text", "text": "d"}, AUDIO_PART]}),
            chat_of(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "d"}],
                    "content[1]": AUDIO_PART,
                }
            ),
        ),
    ],
    ids=["empty-name-as-json", "empty-name", "unknown-field", "unknown-part", "field-vs-part"],
)
def test_a_message_leftover_never_keys_like_a_field_named_after_it(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    """Leftovers are one entry of (where, value) pairs, not entries named by JSON path."""
    assert digest(CHAT, a) != digest(CHAT, b)


def test_a_long_chat_with_a_leftover_on_every_turn_is_keyed_not_refused() -> None:
    """The SDKs echo `refusal: null` (and more) on each assistant turn: 70 such turns are
    one `extra` entry, not 70 (the limit on entries is 64)."""
    turns = [
        {"role": "user", "content": f"q{i}"}
        if i % 2 == 0
        else {"role": "assistant", "content": f"a{i}", "refusal": None, "audio": None}
        for i in range(141)
    ]
    kr = keyed_request(CHAT, chat_of(*turns), "acme", "p1")
    assert kr.key is not None
    # The served model, the key rules' version (since 2026-12-02), the leftovers' digest.
    assert list(kr.key.extra) == ["model", "infercache_key_rules", "messages"]
    fewer = [t for t in turns if "refusal" not in t or t["content"] != "a1"]
    assert digest(CHAT, chat_of(*turns)) != digest(CHAT, chat_of(*fewer))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("data:image/png;base64,QUFBQQ==", "data:image/png,AAAA"),
        ("data:image/png;base64,QUFBQQ==", "data:image/jpeg;base64,QUFBQQ=="),
        ("data:video/jpeg;base64,QUFBQQ==", "data:video/mp4;base64,QUFBQQ=="),
    ],
)
def test_a_data_url_head_is_keyed_not_only_its_bytes(a: str, b: str) -> None:
    """Same decoded bytes, another media type or encoding: the model server reads the head."""
    kind = "video_url" if a.startswith("data:video") else "image_url"

    def body(url: str) -> dict[str, Any]:
        return chat_of({"role": "user", "content": [{"type": kind, kind: {"url": url}}]})

    assert digest(CHAT, body(a)) != digest(CHAT, body(b))
    assert digest(CHAT, body(a)) == digest(CHAT, body(a))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (chat_body(), chat_body(tools=[])),
        (chat_body(), chat_body(modalities=[])),
        (chat_body(), chat_body(stop=[])),
        (chat_body(), chat_body(logit_bias={})),
        (
            chat_of({"role": "assistant", "content": "x"}, USER),
            chat_of({"role": "assistant", "content": "x", "tool_calls": []}, USER),
        ),
    ],
    ids=["tools", "modalities", "stop", "logit_bias", "tool_calls"],
)
def test_an_empty_array_is_not_the_same_as_an_absent_field(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    """Chat templates test `tools is not none` / `tool_calls is defined`: [] is sent."""
    assert digest(CHAT, a) != digest(CHAT, b)


@pytest.mark.parametrize("spelling", [" 12", "+12", "1_2", "\u0661\u0662", "012"])
def test_a_logit_bias_id_spelled_other_than_plainly_keys_apart(spelling: str) -> None:
    """int() reads each of these as 12; the key keeps the spelling sent apart."""
    plain = digest(COMPLETIONS, {"model": "tiny", "prompt": "x", "logit_bias": {"12": 1}})
    other = digest(COMPLETIONS, {"model": "tiny", "prompt": "x", "logit_bias": {spelling: 1}})
    assert plain != other


def test_a_logit_bias_id_beyond_64_bits_is_invalid_not_an_internal_error() -> None:
    """The key encodes ids as signed 64-bit integers: a larger one is INVALID_ARGUMENT."""
    from sidecar.errors import InvalidArgument

    kr = keyed_request(
        COMPLETIONS,
        {"model": "tiny", "prompt": "x", "logit_bias": {"1" + "0" * 20: 1}},
        "acme",
        "p1",
    )
    assert kr.key is not None
    with pytest.raises(InvalidArgument) as info:
        build_key(kr.key, default_model_version=FP)
    assert info.value.field == "key.sampling.logit_bias"


def test_a_model_named_as_a_served_adapter_keys_the_adapters_fingerprint() -> None:
    """The adapter's weights are in the key: new adapter files, new key; another model
    name is keyed as a name only."""
    from sidecar.identity.pod import PodIdentity
    from sidecar.identity.resolver import KeyResolver
    from sidecar.keys import KeyLimits
    from sidecar.wire.openai.keys import for_adapter

    body = chat_body(model="my-lora")

    def key(adapters: dict[str, str], model: str = "my-lora") -> Any:
        kr = for_adapter(keyed_request(CHAT, body | {"model": model}, "acme", "p1"), adapters)
        assert kr.key is not None
        pod = PodIdentity(model_version=FP, adapter_versions=adapters)
        return KeyResolver(pod, KeyLimits()).resolve(kr.key)

    first, second = key({"my-lora": "lora-fp-1"}), key({"my-lora": "lora-fp-2"})
    assert first.adapter_version == "lora-fp-1"
    assert second.adapter_version == "lora-fp-2"
    assert first.digest != second.digest
    other = key({"my-lora": "lora-fp-1"}, model="tiny")
    assert other.adapter_version == ""


def test_stream_options_other_than_include_usage_are_keyed() -> None:
    """include_usage is framing rebuilt on a hit; vLLM's continuous_usage_stats (usage in
    every chunk) is what a replay must hold, so it keys apart."""
    plain = digest(CHAT, chat_body(stream=True))
    usage = digest(CHAT, chat_body(stream=True, stream_options={"include_usage": True}))
    both = {"include_usage": True, "continuous_usage_stats": True}
    continuous = digest(CHAT, chat_body(stream=True, stream_options=both))
    assert plain == usage
    assert continuous != usage


def test_stream_options_without_stream_is_refused() -> None:
    """vLLM refuses a non-empty one: the gateway does too, before any lookup (an empty
    one passes: test_gateway_vllm_fields.py)."""
    for stream in ({}, {"stream": False}):
        with pytest.raises(WireError) as info:
            keyed_request(
                CHAT, chat_body(stream_options={"include_usage": True}, **stream), "a", "p"
            )
        assert info.value.field == "stream_options"
    kr = keyed_request(CHAT, chat_body(stream_options=None), "a", "p")
    assert kr.key is not None  # null is absent
