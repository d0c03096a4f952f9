"""Cache keys: every dimension counts, equivalent spellings agree, bad input is refused."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import unicodedata
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sidecar.errors import InvalidArgument
from sidecar.keys import (
    KEY_SCHEMA_VERSION,
    ChatMessage,
    FormatType,
    InputKind,
    KeyLimits,
    KeyRequest,
    ResponseFormat,
    Sampling,
    build_key,
)
from tests.strategies import (
    KEY_DIMENSIONS,
    NFC_E,
    NFD_E,
    SAMPLING_FIELDS,
    key_request_pairs,
    key_requests,
    respelled_requests,
    with_dimension,
)

BASE = KeyRequest(
    tenant="acme",
    model_version="fp1-3f9a",
    prompt_version="support-v3",
    input="How do I reset my password?",
    input_kind=InputKind.TEXT,
)


def digest(req: KeyRequest, **kw: Any) -> bytes:
    return build_key(req, **kw).digest


def sampled(**fields: Any) -> KeyRequest:
    return dataclasses.replace(BASE, sampling=Sampling(**fields))


# --- reference canonical form, written from the documented semantics -------------


def _nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def _f32(x: float) -> float:
    return float(np.float32(x)) + 0.0


def _opt(value: Any, default: Any) -> Any:
    return default if value is None else value


def _reference_format(fmt: ResponseFormat | None) -> tuple[Any, ...]:
    fmt = fmt or ResponseFormat()
    if fmt.type is FormatType.TEXT:
        return (FormatType.TEXT,)
    schema = _nfc(fmt.schema)
    if fmt.type in (FormatType.JSON_SCHEMA, FormatType.JSON_OBJECT) and schema.strip():
        return (fmt.type, json.loads(schema))
    return (fmt.type, schema)


def _reference_input(req: KeyRequest) -> tuple[Any, ...]:
    value = req.input
    if req.input_kind is InputKind.TEXT:
        assert isinstance(value, str)
        return ("text", _nfc(value))
    if req.input_kind is InputKind.CHAT:
        assert isinstance(value, tuple)
        msgs = tuple(
            (_nfc(m.role), _nfc(m.content), _nfc(m.name), _nfc(m.tool_call_id)) for m in value
        )
        return ("chat", msgs)
    if req.input_kind is InputKind.TOKENS:
        assert value is not None
        assert not isinstance(value, str | bytes)
        return ("tokens", tuple(value))
    return ("sha256", value)


def reference(req: KeyRequest) -> tuple[Any, ...]:
    """What a request means: equal references must give equal digests and vice versa."""
    s = req.sampling
    top_k = _opt(s.top_k, 0)
    return (
        _nfc(req.tenant),
        _nfc(req.model_version),
        _nfc(req.adapter_version),
        _nfc(req.prompt_version),
        _f32(_opt(s.temperature, 1.0)),
        _f32(_opt(s.top_p, 1.0)),
        0 if top_k == -1 else top_k,
        _opt(s.max_tokens, 0),
        frozenset(_nfc(x) for x in s.stop),
        s.seed,
        _f32(_opt(s.presence_penalty, 0.0)),
        _f32(_opt(s.frequency_penalty, 0.0)),
        _f32(_opt(s.repetition_penalty, 1.0)),
        _f32(_opt(s.min_p, 0.0)),
        _opt(s.min_tokens, 0),
        frozenset(s.stop_token_ids),
        _opt(s.n, 1),
        s.logprobs,
        bool(s.ignore_eos),
        _reference_format(s.response_format),
        {t: _f32(b) for t, b in s.logit_bias.items()},
        {_nfc(k): _nfc(v) for k, v in req.extra.items()},
        _reference_input(req),
    )


# --- every dimension changes the digest ---------------------------------------------

DIMENSION_CHANGES: dict[str, KeyRequest] = {
    "tenant": dataclasses.replace(BASE, tenant="globex"),
    "model_version": dataclasses.replace(BASE, model_version="fp1-77aa"),
    "adapter_version": dataclasses.replace(BASE, adapter_version="lora-legal-2"),
    "prompt_version": dataclasses.replace(BASE, prompt_version="support-v4"),
    "sampling.temperature": sampled(temperature=0.2),
    "sampling.top_p": sampled(top_p=0.9),
    "sampling.top_k": sampled(top_k=40),
    "sampling.max_tokens": sampled(max_tokens=256),
    "sampling.stop": sampled(stop=("\n",)),
    "sampling.seed": sampled(seed=7),
    "sampling.presence_penalty": sampled(presence_penalty=0.5),
    "sampling.frequency_penalty": sampled(frequency_penalty=0.5),
    "sampling.repetition_penalty": sampled(repetition_penalty=1.1),
    "sampling.min_p": sampled(min_p=0.05),
    "sampling.min_tokens": sampled(min_tokens=8),
    "sampling.stop_token_ids": sampled(stop_token_ids=(2,)),
    "sampling.n": sampled(n=2),
    "sampling.logprobs": sampled(logprobs=5),
    "sampling.ignore_eos": sampled(ignore_eos=True),
    "sampling.response_format": sampled(response_format=ResponseFormat(FormatType.JSON_OBJECT, "")),
    "sampling.logit_bias": sampled(logit_bias={50: -100.0}),
    "extra (new entry)": dataclasses.replace(BASE, extra={"tools": "v1"}),
    "input kind (chat)": dataclasses.replace(
        BASE,
        input=(ChatMessage("user", "How do I reset my password?"),),
        input_kind=InputKind.CHAT,
    ),
    "input kind (tokens)": dataclasses.replace(BASE, input=(1, 2, 3), input_kind=InputKind.TOKENS),
    "input kind (sha256)": dataclasses.replace(
        BASE, input=hashlib.sha256(b"x").digest(), input_kind=InputKind.SHA256
    ),
    "input content": dataclasses.replace(BASE, input="How do I reset my email?"),
}


@pytest.mark.parametrize("dimension", sorted(DIMENSION_CHANGES))
def test_each_dimension_changes_the_digest(dimension: str) -> None:
    """Changing any single key dimension changes the digest."""
    assert digest(DIMENSION_CHANGES[dimension]) != digest(BASE)


def test_dimension_table_covers_every_sampling_field() -> None:
    """A sampling field added to Sampling must be added to the dimension test too."""
    covered = {d.removeprefix("sampling.") for d in DIMENSION_CHANGES if d.startswith("sampling.")}
    assert covered == set(SAMPLING_FIELDS)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"tools": "v1"}, {"tools": "v2"}),
        ({"tools": "v1"}, {"tool": "v1"}),
        ({"tools": "v1"}, {"tools": "v1", "corpus": "2024-06"}),
        ({"tools": ""}, {}),
    ],
)
def test_extra_entries_change_the_digest(a: dict[str, str], b: dict[str, str]) -> None:
    """A different extra key, value or entry count gives a different digest."""
    assert digest(dataclasses.replace(BASE, extra=a)) != digest(dataclasses.replace(BASE, extra=b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Sampling(seed=None), Sampling(seed=0)),
        (Sampling(logprobs=None), Sampling(logprobs=0)),
        (Sampling(stop=()), Sampling(stop=("",))),
        (
            Sampling(response_format=ResponseFormat(FormatType.REGEX, "a+")),
            Sampling(response_format=ResponseFormat(FormatType.GRAMMAR, "a+")),
        ),
        (
            Sampling(response_format=ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"string"}')),
            Sampling(response_format=ResponseFormat(FormatType.JSON_SCHEMA, '{"type":"number"}')),
        ),
        (Sampling(logit_bias={1: 5.0}), Sampling(logit_bias={2: 5.0})),
    ],
    ids=[
        "seed-unset-vs-0",
        "logprobs-unset-vs-0",
        "stop-empty-string",
        "regex-vs-grammar",
        "schema-content",
        "logit-bias-token",
    ],
)
def test_distinct_sampling_meanings_differ(a: Sampling, b: Sampling) -> None:
    """Sampling settings that mean different things never share a digest."""
    da = digest(dataclasses.replace(BASE, sampling=a))
    assert da != digest(dataclasses.replace(BASE, sampling=b))


# --- equivalent requests agree --------------------------------------------------------

EQUIVALENT: dict[str, tuple[KeyRequest, KeyRequest]] = {
    "extra map order": (
        dataclasses.replace(BASE, extra={"a": "1", "b": "2"}),
        dataclasses.replace(BASE, extra={"b": "2", "a": "1"}),
    ),
    "logit_bias map order": (
        sampled(logit_bias={1: 5.0, 9: -1.0}),
        sampled(logit_bias={9: -1.0, 1: 5.0}),
    ),
    "0.7 vs 0.70": (sampled(temperature=0.7), sampled(temperature=float("0.70"))),
    "0.1+0.2 vs 0.3": (sampled(temperature=0.1 + 0.2), sampled(temperature=0.3)),
    "-0.0 vs 0.0": (sampled(presence_penalty=-0.0), sampled(presence_penalty=0.0)),
    "NFC vs NFD text": (
        dataclasses.replace(BASE, input=NFC_E),
        dataclasses.replace(BASE, input=NFD_E),
    ),
    "NFC vs NFD dimension": (
        dataclasses.replace(BASE, tenant=NFC_E),
        dataclasses.replace(BASE, tenant=NFD_E),
    ),
    "NFC vs NFD chat": (
        dataclasses.replace(BASE, input=(ChatMessage("user", NFC_E),), input_kind=InputKind.CHAT),
        dataclasses.replace(BASE, input=(ChatMessage("user", NFD_E),), input_kind=InputKind.CHAT),
    ),
    "NFC vs NFD extra": (
        dataclasses.replace(BASE, extra={NFC_E: NFC_E}),
        dataclasses.replace(BASE, extra={NFD_E: NFD_E}),
    ),
    "stop order and duplicates": (
        sampled(stop=("END", "\n")),
        sampled(stop=("\n", "END", "\n", "END")),
    ),
    "stop NFC vs NFD": (sampled(stop=(NFC_E,)), sampled(stop=(NFD_E, NFC_E))),
    "stop_token_ids order and duplicates": (
        sampled(stop_token_ids=(2, 7)),
        sampled(stop_token_ids=(7, 2, 7)),
    ),
    "top_k -1 vs 0": (sampled(top_k=-1), sampled(top_k=0)),
    "top_k -1 vs unset": (sampled(top_k=-1), sampled()),
    "ignore_eos false vs unset": (sampled(ignore_eos=False), sampled()),
    "response_format text vs unset": (sampled(response_format=ResponseFormat()), sampled()),
    "JSON schema key order and whitespace": (
        sampled(
            response_format=ResponseFormat(
                FormatType.JSON_SCHEMA, '{"type":"object","properties":{"a":{"type":"string"}}}'
            )
        ),
        sampled(
            response_format=ResponseFormat(
                FormatType.JSON_SCHEMA,
                '{\n  "properties": { "a": { "type": "string" } },\n  "type": "object"\n}',
            )
        ),
    ),
}

DEFAULTS = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "max_tokens": 0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "min_tokens": 0,
    "n": 1,
    "ignore_eos": False,
}


@pytest.mark.parametrize("case", sorted(EQUIVALENT))
def test_equivalent_requests_share_a_digest(case: str) -> None:
    """Spellings that mean the same request give the same digest."""
    a, b = EQUIVALENT[case]
    assert digest(a) == digest(b)


@pytest.mark.parametrize(("name", "value"), sorted(DEFAULTS.items()))
def test_explicit_default_equals_unset(name: str, value: Any) -> None:
    """Sending a sampling field's documented default gives the same digest as leaving it out."""
    assert digest(sampled(**{name: value})) == digest(BASE)


def test_default_model_version_fills_an_empty_one() -> None:
    """An empty model_version takes the pod's default; an explicit one wins over it."""
    implicit = build_key(dataclasses.replace(BASE, model_version=""), default_model_version="fp1")
    explicit = build_key(dataclasses.replace(BASE, model_version="fp1"))
    assert implicit.digest == explicit.digest
    assert implicit.model_version == "fp1"
    other = build_key(dataclasses.replace(BASE, model_version="fp2"), default_model_version="fp1")
    assert other.model_version == "fp2"
    assert other.digest != explicit.digest


def test_key_dimensions_are_reported_normalised() -> None:
    """CacheKey exposes NFC dimensions, so invalidation matches either spelling."""
    key = build_key(dataclasses.replace(BASE, tenant=NFD_E, prompt_version=NFD_E))
    assert key.tenant == NFC_E
    assert key.prompt_version == NFC_E


# --- unambiguous encoding -------------------------------------------------------------

ADJACENT = [
    (("tenant", "a:b"), ("model_version", "c"), ("tenant", "a"), ("model_version", "b:c")),
    (
        ("model_version", "a:b"),
        ("adapter_version", "c"),
        ("model_version", "a"),
        ("adapter_version", "b:c"),
    ),
    (
        ("adapter_version", "a:b"),
        ("prompt_version", "c"),
        ("adapter_version", "a"),
        ("prompt_version", "b:c"),
    ),
    (("tenant", "ab"), ("model_version", "c"), ("tenant", "a"), ("model_version", "bc")),
]


@pytest.mark.parametrize("case", ADJACENT, ids=lambda c: f"{c[0][0]}+{c[1][0]}")
def test_adjacent_dimensions_do_not_run_together(case: tuple[tuple[str, str], ...]) -> None:
    """'a:b'+'c' and 'a'+'b:c' across adjacent dimensions give different digests."""
    (f1, v1), (f2, v2), (g1, w1), (g2, w2) = case
    left: dict[str, Any] = {"adapter_version": "x", f1: v1, f2: v2}
    right: dict[str, Any] = {"adapter_version": "x", g1: w1, g2: w2}
    assert digest(dataclasses.replace(BASE, **left)) != digest(dataclasses.replace(BASE, **right))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"a:b": "c"}, {"a": "b:c"}),
        ({"a": "b", "c": ""}, {"a": "bc"}),
        ({"ab": ""}, {"a": "b"}),
    ],
)
def test_extra_key_value_boundaries_are_unambiguous(a: dict[str, str], b: dict[str, str]) -> None:
    """Moving characters between an extra key and its value changes the digest."""
    assert digest(dataclasses.replace(BASE, extra=a)) != digest(dataclasses.replace(BASE, extra=b))


def test_stop_entry_boundaries_are_unambiguous() -> None:
    """Stop strings ['a:b', 'c'] and ['a', 'b:c'] give different digests."""
    assert digest(sampled(stop=("a:b", "c"))) != digest(sampled(stop=("a", "b:c")))


def test_chat_field_boundaries_are_unambiguous() -> None:
    """Moving text between chat messages or between role and content changes the digest."""

    def chat(*msgs: ChatMessage) -> bytes:
        return digest(dataclasses.replace(BASE, input=msgs, input_kind=InputKind.CHAT))

    assert chat(ChatMessage("user", "ab"), ChatMessage("user", "c")) != chat(
        ChatMessage("user", "a"), ChatMessage("user", "bc")
    )
    assert chat(ChatMessage("user", "x")) != chat(ChatMessage("use", "rx"))
    assert chat(ChatMessage("user", "x", name="n")) != chat(
        ChatMessage("user", "x", tool_call_id="n")
    )


def test_text_and_its_sha256_are_different_keys() -> None:
    """A text input never matches an input_sha256 of the same bytes."""
    text = "How do I reset my password?"
    hashed = dataclasses.replace(
        BASE, input=hashlib.sha256(text.encode()).digest(), input_kind=InputKind.SHA256
    )
    assert digest(hashed) != digest(dataclasses.replace(BASE, input=text))


def test_token_order_matters() -> None:
    """Token ids are a sequence: order changes the digest."""
    a = dataclasses.replace(BASE, input=(1, 2), input_kind=InputKind.TOKENS)
    b = dataclasses.replace(BASE, input=(2, 1), input_kind=InputKind.TOKENS)
    assert digest(a) != digest(b)


def test_material_never_contains_the_prompt_text() -> None:
    """Key material carries a digest of the input, not the prompt itself."""
    secret = "my-secret-prompt-4f1c"
    key = build_key(dataclasses.replace(BASE, input=secret))
    assert secret.encode() not in key.material
    chat = build_key(
        dataclasses.replace(BASE, input=(ChatMessage("user", secret),), input_kind=InputKind.CHAT)
    )
    assert secret.encode() not in chat.material


def test_digest_is_pinned_for_this_schema_version() -> None:
    """The encoding of schema v1 is stable: fleets of mixed versions must agree on digests."""
    assert KEY_SCHEMA_VERSION == 1
    assert digest(BASE).hex() == GOLDEN_V1


GOLDEN_V1 = "e7d63fc058032909cd474379aaf8c760e526639a62f8797c4cc93ba756e12ca0"


# --- required fields and limits -------------------------------------------------------


@pytest.mark.parametrize("field", ["tenant", "model_version", "prompt_version"])
@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_missing_required_dimension_is_refused(field: str, value: str) -> None:
    """An empty or whitespace-only required dimension is INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument) as err:
        build_key(with_dimension(BASE, field, value))
    assert err.value.field == f"key.{field}"
    assert f"key.{field}" in str(err.value)


@pytest.mark.parametrize(
    ("input_value", "kind"),
    [(None, None), ("text", None), (None, InputKind.TEXT)],
)
def test_missing_input_is_refused(input_value: Any, kind: InputKind | None) -> None:
    """A request without an input is INVALID_ARGUMENT naming key.input."""
    with pytest.raises(InvalidArgument) as err:
        build_key(dataclasses.replace(BASE, input=input_value, input_kind=kind))
    assert err.value.field == "key.input"


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (dataclasses.replace(BASE, input=(), input_kind=InputKind.CHAT), "key.chat.messages"),
        (
            dataclasses.replace(BASE, input=(ChatMessage("", "x"),), input_kind=InputKind.CHAT),
            "key.chat.messages[0].role",
        ),
        (
            dataclasses.replace(BASE, input=b"short", input_kind=InputKind.SHA256),
            "key.input_sha256",
        ),
        (dataclasses.replace(BASE, input=(-1,), input_kind=InputKind.TOKENS), "key.token_ids"),
        (dataclasses.replace(BASE, input=(2**32,), input_kind=InputKind.TOKENS), "key.token_ids"),
        (dataclasses.replace(BASE, extra={"": "v"}), "key.extra"),
        (dataclasses.replace(BASE, extra={NFC_E: "1", NFD_E: "2"}), "key.extra"),
        (
            sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, "")),
            "key.sampling.response_format.schema",
        ),
        (
            sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, "{not json")),
            "key.sampling.response_format.schema",
        ),
        (
            sampled(
                response_format=ResponseFormat(FormatType.JSON_SCHEMA, "[" * 50_000 + "]" * 50_000)
            ),
            "key.sampling.response_format.schema",
        ),
    ],
    ids=[
        "empty-chat",
        "empty-role",
        "short-sha",
        "negative-token",
        "huge-token",
        "empty-extra-key",
        "nfc-duplicate-extra",
        "schema-missing",
        "schema-not-json",
        "schema-too-deep",
    ],
)
def test_malformed_input_is_refused(req: KeyRequest, field: str) -> None:
    """Malformed inputs are INVALID_ARGUMENT naming the offending field."""
    with pytest.raises(InvalidArgument) as err:
        build_key(req)
    assert err.value.field.startswith(field)


LIMITS = KeyLimits(
    max_dimension_chars=8,
    max_input_bytes=6,
    max_chat_messages=2,
    max_token_ids=3,
    max_stop_entries=2,
    max_stop_chars=4,
    max_extra_entries=2,
    max_extra_key_chars=3,
    max_extra_value_chars=5,
    max_schema_chars=40,
    max_logit_bias_entries=2,
)

SHORT = KeyRequest("t", "m", "p", input="x", input_kind=InputKind.TEXT)


def short_sampled(**fields: Any) -> KeyRequest:
    return dataclasses.replace(SHORT, sampling=Sampling(**fields))


# name -> (request at the limit, request one past it, field named in the error)
LIMIT_CASES: dict[str, tuple[KeyRequest, KeyRequest, str]] = {
    "tenant": (
        dataclasses.replace(SHORT, tenant="t" * 8),
        dataclasses.replace(SHORT, tenant="t" * 9),
        "key.tenant",
    ),
    "model_version": (
        dataclasses.replace(SHORT, model_version="m" * 8),
        dataclasses.replace(SHORT, model_version="m" * 9),
        "key.model_version",
    ),
    "adapter_version": (
        dataclasses.replace(SHORT, adapter_version="a" * 8),
        dataclasses.replace(SHORT, adapter_version="a" * 9),
        "key.adapter_version",
    ),
    "prompt_version": (
        dataclasses.replace(SHORT, prompt_version="p" * 8),
        dataclasses.replace(SHORT, prompt_version="p" * 9),
        "key.prompt_version",
    ),
    "text bytes": (
        dataclasses.replace(SHORT, input="\u00e9" * 3),  # 6 UTF-8 bytes
        dataclasses.replace(SHORT, input="\u00e9" * 3 + "x"),
        "key.text",
    ),
    "chat messages": (
        dataclasses.replace(SHORT, input=(ChatMessage("u", "a"),) * 2, input_kind=InputKind.CHAT),
        dataclasses.replace(SHORT, input=(ChatMessage("u", "a"),) * 3, input_kind=InputKind.CHAT),
        "key.chat.messages",
    ),
    "chat content bytes": (
        dataclasses.replace(
            SHORT,
            input=(ChatMessage("u", "abc"), ChatMessage("u", "def")),
            input_kind=InputKind.CHAT,
        ),
        dataclasses.replace(
            SHORT,
            input=(ChatMessage("u", "abc"), ChatMessage("u", "defg")),
            input_kind=InputKind.CHAT,
        ),
        "key.chat",
    ),
    "chat role": (
        dataclasses.replace(SHORT, input=(ChatMessage("r" * 8, "a"),), input_kind=InputKind.CHAT),
        dataclasses.replace(SHORT, input=(ChatMessage("r" * 9, "a"),), input_kind=InputKind.CHAT),
        "key.chat.messages[0].role",
    ),
    "token ids": (
        dataclasses.replace(SHORT, input=(1, 2, 3), input_kind=InputKind.TOKENS),
        dataclasses.replace(SHORT, input=(1, 2, 3, 4), input_kind=InputKind.TOKENS),
        "key.token_ids",
    ),
    "stop entries": (
        short_sampled(stop=("a", "b")),
        short_sampled(stop=("a", "b", "c")),
        "key.sampling.stop",
    ),
    "stop chars": (
        short_sampled(stop=("abcd",)),
        short_sampled(stop=("abcde",)),
        "key.sampling.stop[0]",
    ),
    "stop token ids": (
        short_sampled(stop_token_ids=(1, 2)),
        short_sampled(stop_token_ids=(1, 2, 3)),
        "key.sampling.stop_token_ids",
    ),
    "extra entries": (
        dataclasses.replace(SHORT, extra={"a": "", "b": ""}),
        dataclasses.replace(SHORT, extra={"a": "", "b": "", "c": ""}),
        "key.extra",
    ),
    "extra key chars": (
        dataclasses.replace(SHORT, extra={"abc": ""}),
        dataclasses.replace(SHORT, extra={"abcd": ""}),
        "key.extra",
    ),
    "extra value chars": (
        dataclasses.replace(SHORT, extra={"a": "12345"}),
        dataclasses.replace(SHORT, extra={"a": "123456"}),
        "key.extra",
    ),
    "schema chars": (
        short_sampled(response_format=ResponseFormat(FormatType.REGEX, "x" * 40)),
        short_sampled(response_format=ResponseFormat(FormatType.REGEX, "x" * 41)),
        "key.sampling.response_format.schema",
    ),
    "logit bias entries": (
        short_sampled(logit_bias={1: 1.0, 2: 1.0}),
        short_sampled(logit_bias={1: 1.0, 2: 1.0, 3: 1.0}),
        "key.sampling.logit_bias",
    ),
}


@pytest.mark.parametrize("case", sorted(LIMIT_CASES))
def test_length_limits(case: str) -> None:
    """A value at its limit is accepted; one past it is INVALID_ARGUMENT naming the field."""
    ok, too_big, field = LIMIT_CASES[case]
    build_key(ok, LIMITS)
    with pytest.raises(InvalidArgument) as err:
        build_key(too_big, LIMITS)
    assert err.value.field.startswith(field)
    assert "limit" in err.value.problem


def test_default_limits_allow_typical_sizes() -> None:
    """The default limits accept a 256-char dimension and 64 stop strings, not 257 or 65."""
    build_key(dataclasses.replace(BASE, tenant="t" * 256))
    with pytest.raises(InvalidArgument):
        build_key(dataclasses.replace(BASE, tenant="t" * 257))
    build_key(sampled(stop=tuple(str(i) for i in range(64))))
    with pytest.raises(InvalidArgument):
        build_key(sampled(stop=tuple(str(i) for i in range(65))))


FLOAT_FIELDS = [
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
]


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_refused(field: str, value: float) -> None:
    """NaN and infinities are INVALID_ARGUMENT naming the sampling field."""
    with pytest.raises(InvalidArgument) as err:
        build_key(sampled(**{field: value}))
    assert err.value.field == f"key.sampling.{field}"


def test_non_finite_logit_bias_is_refused() -> None:
    """A NaN logit bias is INVALID_ARGUMENT naming logit_bias."""
    with pytest.raises(InvalidArgument) as err:
        build_key(sampled(logit_bias={5: float("nan")}))
    assert err.value.field.startswith("key.sampling.logit_bias")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 100.5),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("presence_penalty", -2.01),
        ("presence_penalty", 2.01),
        ("frequency_penalty", 2.5),
        ("repetition_penalty", 0.0),
        ("min_p", -0.1),
        ("min_p", 1.5),
        ("top_k", -2),
        ("max_tokens", -1),
        ("min_tokens", -1),
        ("n", 0),
        ("n", 1025),
        ("logprobs", -1),
        ("seed", 2**63),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: float) -> None:
    """Sampling values outside their documented range are INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument) as err:
        build_key(sampled(**{field: value}))
    assert err.value.field == f"key.sampling.{field}"


def test_out_of_range_logit_bias_is_refused() -> None:
    """A logit bias beyond +-100 is INVALID_ARGUMENT naming logit_bias."""
    with pytest.raises(InvalidArgument) as err:
        build_key(sampled(logit_bias={5: 100.5}))
    assert err.value.field.startswith("key.sampling.logit_bias")


# --- properties -------------------------------------------------------------------------


@given(key_requests())
def test_digest_is_deterministic_and_32_bytes(req: KeyRequest) -> None:
    """Building a key twice gives the same full-width SHA-256 of its material."""
    a, b = build_key(req), build_key(req)
    assert a.digest == b.digest
    assert len(a.digest) == 32
    assert a.digest == hashlib.sha256(a.material).digest()


@given(key_requests().flatmap(lambda r: st.tuples(st.just(r), respelled_requests(r))))
def test_respelling_a_request_never_changes_the_digest(pair: tuple[KeyRequest, KeyRequest]) -> None:
    """Every dimension spelled differently but meaning the same gives the same digest."""
    a, b = pair
    assert reference(a) == reference(b)  # the strategy's classes agree with the reference
    assert digest(a) == digest(b)


@given(key_request_pairs())
def test_digests_are_equal_exactly_when_requests_mean_the_same(
    pair: tuple[KeyRequest, KeyRequest],
) -> None:
    """Two requests share a digest if and only if their canonical meaning is equal."""
    a, b = pair
    assert (digest(a) == digest(b)) == (reference(a) == reference(b))


@given(key_requests(), st.sampled_from(sorted(KEY_DIMENSIONS)), st.data())
def test_changing_one_dimension_changes_the_digest(
    req: KeyRequest, dimension: str, data: st.DataObject
) -> None:
    """Replacing any single dimension with a value of different meaning changes the digest."""
    variant = with_dimension(req, dimension, data.draw(KEY_DIMENSIONS[dimension]()))
    assume(reference(variant) != reference(req))
    assert digest(variant) != digest(req)


@given(key_requests(), st.randoms(use_true_random=False))
def test_permuting_stop_and_extra_never_changes_the_digest(req: KeyRequest, rnd: Any) -> None:
    """Stop strings, stop ids, extra and logit_bias are sets/maps: their order never matters."""
    s = req.sampling
    stop, ids = list(s.stop), list(s.stop_token_ids)
    extra, bias = list(req.extra.items()), list(s.logit_bias.items())
    for items in (stop, ids, extra, bias):
        rnd.shuffle(items)
    permuted = dataclasses.replace(
        req,
        extra=dict(extra),
        sampling=dataclasses.replace(
            s, stop=tuple(stop), stop_token_ids=tuple(ids), logit_bias=dict(bias)
        ),
    )
    assert digest(permuted) == digest(req)
