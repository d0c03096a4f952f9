"""Keys over real gRPC: when in doubt, different (issue 13, item 1).

Each test reproduces a way schema v1 gave a wrong hit or a crash: NFC merging
distinct identities, an unset parameter hashed as its default, an unknown field
silently dropped, a lone surrogate in a JSON schema answered UNKNOWN, and
OpenAI request fields the key had no place for.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import cache_pb2_grpc
from infercache_client import make_key

from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar

LOOKUP = "/infercache.v1.CacheService/Lookup"
STORE = "/infercache.v1.CacheService/Store"


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar) -> InProcessSidecar:
    return await start_sidecar()


async def _misses_after_storing(
    sidecar: InProcessSidecar, stored: pb.CacheKey, other: pb.CacheKey
) -> None:
    await sidecar.store(stored, b"answer for the first spelling")
    assert (await sidecar.client.lookup(stored)).outcome == pb.LOOKUP_OUTCOME_HIT
    found = await sidecar.client.lookup(other)
    assert found.outcome == pb.LOOKUP_OUTCOME_MISS, "a different request hit another's entry"
    assert found.payload == b""


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"tenant": "Key-corp"}, {"tenant": "\u212aey-corp"}),  # KELVIN SIGN
        ({"tenant": "\u03a9-corp"}, {"tenant": "\u2126-corp"}),  # OHM SIGN
        ({"text": "Why;"}, {"text": "Why\u037e"}),  # GREEK QUESTION MARK
        ({"text": "caf\u00e9"}, {"text": "cafe\u0301"}),  # NFC vs NFD
        ({"stop": ["\u00c5"]}, {"stop": ["\u212b"]}),  # ANGSTROM SIGN
        ({"extra": {"corpus": "K"}}, {"extra": {"corpus": "\u212a"}}),
    ],
    ids=["kelvin-tenant", "ohm-tenant", "greek-question-mark-text", "nfd-text", "stop", "extra"],
)
async def test_strings_are_byte_exact(
    sidecar: InProcessSidecar, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Strings that NFC would merge are different keys (schema v1: the second one HIT)."""
    await _misses_after_storing(sidecar, key(**first), key(**second))


async def test_chat_content_is_byte_exact(sidecar: InProcessSidecar) -> None:
    """Chat content that NFC would merge is a different key."""
    a = make_key(
        tenant="acme",
        model_version="m",
        prompt_version="p",
        chat=[{"role": "user", "content": "K"}],
    )
    b = make_key(
        tenant="acme",
        model_version="m",
        prompt_version="p",
        chat=[{"role": "user", "content": "\u212a"}],
    )
    await _misses_after_storing(sidecar, a, b)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"temperature": 0.0}, {"temperature": 0.0, "repetition_penalty": 1.0}),
        ({}, {"top_k": -1}),
        ({}, {"top_k": 0}),
        ({"top_k": -1}, {"top_k": 0}),
        ({"seed": 7, "temperature": None}, {"seed": 7, "temperature": 1.0}),
        ({"temperature": 0.0}, {"temperature": 0.0, "max_tokens": 0}),
        ({"temperature": 0.0}, {"temperature": 0.0, "n": 1}),
    ],
    ids=[
        "repetition-penalty-1.0",
        "top-k-unset-vs-minus-1",
        "top-k-unset-vs-0",
        "top-k-minus-1-vs-0",
        "seeded-temperature-unset-vs-1.0",
        "max-tokens-unset-vs-0",
        "n-unset-vs-1",
    ],
)
async def test_unset_is_not_a_default(
    sidecar: InProcessSidecar, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """vLLM takes unset parameters from the model's generation config: an explicit default
    is another request (schema v1 hashed unset as the default: the second one HIT)."""
    await _misses_after_storing(sidecar, key(**first), key(**second))


BAD_JSON = '{"a": "\\ud800"}'  # valid UTF-8 text; the JSON string is a lone surrogate


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (
            {
                "response_format": pb.ResponseFormat(
                    type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, schema=BAD_JSON
                )
            },
            "key.sampling.response_format.schema",
        ),
        ({"guided": pb.GuidedDecoding(json=BAD_JSON)}, "key.sampling.guided.json"),
        ({"tools": [{"a": "\ud800"}]}, "key.tools[0]"),
        (
            {"chat_template": {"chat_template_kwargs": BAD_JSON}},
            "key.chat_template.chat_template_kwargs",
        ),
    ],
    ids=["json-schema", "guided-json", "tool", "chat-template-kwargs"],
)
async def test_lone_surrogate_in_json_is_invalid_argument_naming_the_field(
    sidecar: InProcessSidecar, fields: dict[str, Any], field: str
) -> None:
    """A JSON text whose string is a lone surrogate is INVALID_ARGUMENT naming the field, for
    Lookup and Store (schema v1: UnicodeEncodeError in the key builder, answered UNKNOWN)."""
    if "tools" in fields:
        k = key()
        k.tools.append(BAD_JSON)
    else:
        k = key(**fields)
    for call in (sidecar.client.lookup(k), sidecar.client.store(k, b"x")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (err.value.details() or ""), err.value.details()
        assert "Unicode" in (err.value.details() or "")


def _with_unknown_field(message_bytes: bytes, number: int, value: int) -> bytes:
    """The bytes of a message plus a varint field `number` (unknown to this sidecar)."""
    tag, out = number << 3, bytearray(message_bytes)
    while True:  # varint of the tag, then the value (both < 2**14 here)
        byte, tag = tag & 0x7F, tag >> 7
        out.append(byte | (0x80 if tag else 0))
        if not tag:
            break
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (protobuf wire type 2)."""
    assert number < 16
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


async def _raw_lookup(sidecar: InProcessSidecar, request: bytes) -> pb.LookupResponse:
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        call = channel.unary_unary(LOOKUP, response_deserializer=pb.LookupResponse.FromString)
        response: pb.LookupResponse = await call(request, timeout=5)
        return response


async def test_unknown_key_field_is_invalid_argument_naming_its_number(
    sidecar: InProcessSidecar,
) -> None:
    """A newer client's key field 20 is refused, not dropped (schema v1: two keys that
    differed only in field 20 shared a digest, so the second one HIT)."""
    k = key(temperature=0.0)
    await sidecar.store(k, b"answer without field 20")
    plain = _field(1, k.SerializeToString())  # LookupRequest.key
    assert (await _raw_lookup(sidecar, plain)).outcome == pb.LOOKUP_OUTCOME_HIT
    newer = _field(1, _with_unknown_field(k.SerializeToString(), 20, 1))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _raw_lookup(sidecar, newer)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert details.startswith("key: "), details
    assert "field number 20" in details, details


@pytest.mark.parametrize(
    ("path", "number"),
    [("key.sampling", 40), ("key.chat.messages[0]", 9), ("traits", 12)],
    ids=["sampling", "chat-message", "traits"],
)
async def test_unknown_nested_field_is_invalid_argument_naming_its_place(
    sidecar: InProcessSidecar, path: str, number: int
) -> None:
    """Unknown fields anywhere in the key's message tree (and in the declared traits) are
    refused, naming where and which number, for Lookup and for Store."""
    k = make_key(
        tenant="acme",
        model_version="m",
        prompt_version="p",
        chat=[{"role": "user", "content": "q"}],
    )
    traits = b""
    if path == "key.sampling":
        k.sampling.MergeFromString(
            _with_unknown_field(pb.SamplingParams(seed=1).SerializeToString(), number, 1)
        )
    elif path == "key.chat.messages[0]":
        k.chat.messages[0].MergeFromString(_with_unknown_field(b"", number, 1))
    else:
        traits = _field(5, _with_unknown_field(b"", number, 1))  # LookupRequest.traits
    raw_key = k.SerializeToString()
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        for method, traits_field in ((LOOKUP, 5), (STORE, 8)):
            call = channel.unary_unary(method)
            body = _field(1, raw_key)
            if traits:
                body += bytes([traits_field << 3 | 2]) + traits[1:]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(body, timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            details = err.value.details() or ""
            assert details.startswith(path + ": "), details
            assert f"field number {number}" in details, details


async def test_unknown_field_in_a_stream_opening_key_is_refused(sidecar: InProcessSidecar) -> None:
    """StoreStream's opening message goes through the same key conversion."""
    k = key()
    k.MergeFromString(_with_unknown_field(b"", 20, 1))
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = cache_pb2_grpc.CacheServiceStub(channel)

        async def messages() -> Any:
            yield pb.StoreStreamRequest(open=pb.StoreRequest(key=k))

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.StoreStream(messages(), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field number 20" in (err.value.details() or "")


def _chat_key(messages: list[dict[str, Any]], **kw: Any) -> pb.CacheKey:
    return make_key(tenant="acme", model_version="m", prompt_version="p", chat=messages, **kw)


CALL = {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}
TOOL = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
IMAGE = bytes(range(32))
SURFACE: dict[str, tuple[pb.CacheKey, pb.CacheKey]] = {
    "tool call arguments": (
        _chat_key([{"role": "assistant", "content": None, "tool_calls": [CALL]}]),
        _chat_key(
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [CALL | {"function": {"name": "get", "arguments": '{"a":2}'}}],
                }
            ]
        ),
    ),
    "tool_call_id": (
        _chat_key([{"role": "tool", "content": "1", "tool_call_id": "c1"}]),
        _chat_key([{"role": "tool", "content": "1", "tool_call_id": "c2"}]),
    ),
    "reasoning content": (
        _chat_key([{"role": "assistant", "content": "x", "reasoning_content": "a"}]),
        _chat_key([{"role": "assistant", "content": "x", "reasoning_content": "b"}]),
    ),
    "image digest": (
        _chat_key([{"role": "user", "content": [{"type": "image", "sha256": IMAGE}]}]),
        _chat_key([{"role": "user", "content": [{"type": "image", "sha256": IMAGE[::-1]}]}]),
    ),
    "image detail": (
        _chat_key([{"role": "user", "content": [{"type": "image", "sha256": IMAGE}]}]),
        _chat_key(
            [{"role": "user", "content": [{"type": "image", "sha256": IMAGE, "detail": "low"}]}]
        ),
    ),
    "tools": (
        _chat_key([{"role": "user", "content": "q"}]),
        _chat_key([{"role": "user", "content": "q"}], tools=[TOOL]),
    ),
    "tool_choice": (
        _chat_key([{"role": "user", "content": "q"}], tools=[TOOL]),
        _chat_key([{"role": "user", "content": "q"}], tools=[TOOL], tool_choice="required"),
    ),
    "parallel_tool_calls": (
        _chat_key([{"role": "user", "content": "q"}], tools=[TOOL]),
        _chat_key([{"role": "user", "content": "q"}], tools=[TOOL], parallel_tool_calls=False),
    ),
    "enable_thinking": (
        _chat_key(
            [{"role": "user", "content": "q"}],
            chat_template={"chat_template_kwargs": {"enable_thinking": True}},
        ),
        _chat_key(
            [{"role": "user", "content": "q"}],
            chat_template={"chat_template_kwargs": {"enable_thinking": False}},
        ),
    ),
    "add_generation_prompt": (
        _chat_key([{"role": "user", "content": "q"}]),
        _chat_key(
            [{"role": "user", "content": "q"}], chat_template={"add_generation_prompt": False}
        ),
    ),
    "guided choice": (
        key(guided=pb.GuidedDecoding(choice=["yes", "no"])),
        key(guided=pb.GuidedDecoding(choice=["no", "yes"])),
    ),
    "logprobs": (key(return_logprobs=True), key(return_logprobs=True, top_logprobs=2)),
    "endpoint": (key(endpoint="completions"), key(endpoint="embeddings")),
    "embedding dimensions": (
        key(endpoint="embeddings", output={"dimensions": 256}),
        key(endpoint="embeddings", output={"dimensions": 512}),
    ),
}


@pytest.mark.parametrize("case", sorted(SURFACE))
async def test_openai_request_surface_is_in_the_key(sidecar: InProcessSidecar, case: str) -> None:
    """Each OpenAI / vLLM request field the schema now holds separates keys (schema v1 had no
    place for them: callers flattened or dropped them)."""
    first, second = SURFACE[case]
    await _misses_after_storing(sidecar, first, second)


async def test_tools_in_the_key_bypass_under_a_tools_policy(
    start_sidecar: StartSidecar, tmp_path: Any
) -> None:
    """`CacheKey.tools` tells the policy the request offers tools, like extra["tools"] does."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\ndefaults:\n  bypass: {tools: true}\n")
    sidecar = await start_sidecar(policy_file=str(policy))
    found = await sidecar.client.lookup(key(temperature=0.0, tools=[TOOL]))
    assert found.outcome == pb.LOOKUP_OUTCOME_BYPASS
    assert found.bypass_code == pb.BYPASS_REASON_TOOLS
