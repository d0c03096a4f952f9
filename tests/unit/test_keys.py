"""Cache keys: every dimension counts, only engine-exact spellings agree, bad input is refused."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sidecar.errors import InvalidArgument
from sidecar.keys import (
    KEY_SCHEMA_VERSION,
    ChatMessage,
    ChatTemplateOptions,
    ContentPart,
    FormatType,
    GuidedDecoding,
    InputKind,
    KeyLimits,
    KeyRequest,
    OutputOptions,
    PartKind,
    ResponseFormat,
    Sampling,
    ToolCall,
    build_key,
)
from tests.support.strategies.keys import (
    KEY_DIMENSIONS,
    REQUEST_FIELDS,
    SAMPLING_FIELDS,
    key_request_pairs,
    key_requests,
    respelled_requests,
    with_dimension,
)
from tests.support.strategies.pools import KELVIN, NFC_E, NFD_E

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


def chat(*msgs: ChatMessage, base: KeyRequest = BASE) -> KeyRequest:
    return dataclasses.replace(base, input=msgs, input_kind=InputKind.CHAT)


# --- reference meaning, written from the documented semantics (never calls keys.py) ----
# Schema v2: strings are their exact bytes, unset (None) is its own value, floats are
# exact doubles with -0.0 as 0.0, and only maps and true sets ignore order.


def _num(x: float | None) -> float | None:
    return None if x is None else float(x) + 0.0


def _unset_if_empty(value: Any) -> Any:
    """An options object with no field set sends nothing: the same as none."""
    if value is None or all(
        getattr(value, f.name) in (None, ()) for f in dataclasses.fields(value)
    ):
        return None
    return value


def _reference_format(fmt: ResponseFormat | None) -> Any:
    if fmt is None:
        return None
    return (int(fmt.type), fmt.schema, fmt.name, fmt.strict, fmt.description)


def _reference_input(req: KeyRequest) -> tuple[Any, ...]:
    value = req.input
    if req.input_kind is InputKind.TEXT:
        return ("text", value)
    if req.input_kind is InputKind.CHAT:
        assert isinstance(value, tuple)
        msgs = tuple(
            (
                m.role,
                None if m.parts else m.content,  # content is the parts then
                m.name,
                m.tool_call_id,
                tuple(m.parts),
                tuple(m.tool_calls),
                m.reasoning_content,
            )
            for m in value
        )
        return ("chat", msgs)
    if req.input_kind is InputKind.TOKENS:
        assert value is not None
        assert not isinstance(value, str | bytes)
        return ("tokens", tuple(value))
    return ("sha256", value)


_FLOAT_FIELDS = {
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
    "length_penalty",
}
_SET_FIELDS = {"stop_token_ids", "bad_words", "allowed_token_ids"}


def _reference_sampling(s: Sampling) -> tuple[Any, ...]:
    out: list[Any] = []
    for name in SAMPLING_FIELDS:
        value = getattr(s, name)
        if name in _FLOAT_FIELDS:
            value = _num(value)
        elif name in _SET_FIELDS:
            value = frozenset(value)
        elif name == "stop":
            value = tuple(value)
        elif name == "logit_bias":
            value = frozenset((t, _num(b)) for t, b in value.items())
        elif name == "response_format":
            value = _reference_format(value)
        elif name == "guided":
            value = _unset_if_empty(value)
        out.append((name, value))
    return tuple(out)


def reference(req: KeyRequest) -> tuple[Any, ...]:
    """What a request means: equal references must give equal digests and vice versa."""
    return (
        req.tenant,
        req.model_version,
        req.adapter_version,
        req.prompt_version,
        _reference_sampling(req.sampling),
        frozenset(req.extra.items()),
        tuple(req.tools),
        req.tool_choice,
        req.parallel_tool_calls,
        _unset_if_empty(req.chat_template),
        req.endpoint,
        _unset_if_empty(req.output),
        _reference_input(req),
    )


# --- every dimension changes the digest ---------------------------------------------

IMAGE = hashlib.sha256(b"png").digest()
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
    "sampling.top_logprobs": sampled(top_logprobs=3),
    "sampling.return_logprobs": sampled(return_logprobs=True),
    "sampling.prompt_logprobs": sampled(prompt_logprobs=1),
    "sampling.length_penalty": sampled(length_penalty=0.5),
    "sampling.bad_words": sampled(bad_words=("darn",)),
    "sampling.allowed_token_ids": sampled(allowed_token_ids=(5, 6)),
    "sampling.include_stop_str_in_output": sampled(include_stop_str_in_output=True),
    "sampling.skip_special_tokens": sampled(skip_special_tokens=False),
    "sampling.spaces_between_special_tokens": sampled(spaces_between_special_tokens=False),
    "sampling.best_of": sampled(best_of=3),
    "sampling.use_beam_search": sampled(use_beam_search=True),
    "sampling.truncate_prompt_tokens": sampled(truncate_prompt_tokens=128),
    "sampling.max_completion_tokens": sampled(max_completion_tokens=64),
    "sampling.guided": sampled(guided=GuidedDecoding(choice=("yes", "no"))),
    "extra (new entry)": dataclasses.replace(BASE, extra={"tools": "v1"}),
    "tools": dataclasses.replace(BASE, tools=('{"type":"function","function":{"name":"f"}}',)),
    "tool_choice": dataclasses.replace(BASE, tool_choice="required"),
    "parallel_tool_calls": dataclasses.replace(BASE, parallel_tool_calls=False),
    "chat_template": dataclasses.replace(
        BASE, chat_template=ChatTemplateOptions(chat_template_kwargs='{"enable_thinking":false}')
    ),
    "endpoint": dataclasses.replace(BASE, endpoint="completions"),
    "output": dataclasses.replace(BASE, output=OutputOptions(reasoning_effort="low")),
    "input kind (chat)": chat(ChatMessage("user", "How do I reset my password?")),
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


def test_dimension_table_covers_every_request_field() -> None:
    """A field added to KeyRequest must be added to the dimension test and the strategies."""
    covered = {d.split(" ")[0] for d in DIMENSION_CHANGES if not d.startswith("sampling.")}
    assert set(REQUEST_FIELDS) - {"sampling"} <= covered
    assert set(REQUEST_FIELDS) - {"sampling"} <= set(KEY_DIMENSIONS)


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


# --- only equivalences exact for every engine agree ---------------------------------

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
    "-0.0 vs 0.0": (sampled(presence_penalty=-0.0), sampled(presence_penalty=0.0)),
    "stop_token_ids order and duplicates": (
        sampled(stop_token_ids=(2, 7)),
        sampled(stop_token_ids=(7, 2, 7)),
    ),
    "bad_words order and duplicates": (
        sampled(bad_words=("a", "b")),
        sampled(bad_words=("b", "a", "b")),
    ),
    "allowed_token_ids order and duplicates": (
        sampled(allowed_token_ids=(3, 1)),
        sampled(allowed_token_ids=(1, 3, 3)),
    ),
    "empty options vs none": (
        dataclasses.replace(BASE, chat_template=ChatTemplateOptions(), output=OutputOptions()),
        BASE,
    ),
    "empty guided vs none": (sampled(guided=GuidedDecoding()), BASE),
}


@pytest.mark.parametrize("case", sorted(EQUIVALENT))
def test_equivalent_requests_share_a_digest(case: str) -> None:
    """Spellings that every engine reads alike give the same digest."""
    a, b = EQUIVALENT[case]
    assert digest(a) == digest(b)


SCHEMA_A = '{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}}}'
SCHEMA_B = '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"string"}}}'

# Schema v1 merged each of these pairs; each pair can be answered differently.
DISTINCT: dict[str, tuple[KeyRequest, KeyRequest]] = {
    "tenant K vs KELVIN SIGN": (
        dataclasses.replace(BASE, tenant="Key-corp"),
        dataclasses.replace(BASE, tenant=KELVIN),
    ),
    "tenant OMEGA vs OHM SIGN": (
        dataclasses.replace(BASE, tenant="\u03a9"),
        dataclasses.replace(BASE, tenant="\u2126"),
    ),
    "text ; vs GREEK QUESTION MARK": (
        dataclasses.replace(BASE, input="a;"),
        dataclasses.replace(BASE, input="a\u037e"),
    ),
    "NFC vs NFD text": (
        dataclasses.replace(BASE, input=NFC_E),
        dataclasses.replace(BASE, input=NFD_E),
    ),
    "NFC vs NFD dimension": (
        dataclasses.replace(BASE, prompt_version=NFC_E),
        dataclasses.replace(BASE, prompt_version=NFD_E),
    ),
    "NFC vs NFD chat": (chat(ChatMessage("user", NFC_E)), chat(ChatMessage("user", NFD_E))),
    "NFC vs NFD extra": (
        dataclasses.replace(BASE, extra={NFC_E: NFC_E}),
        dataclasses.replace(BASE, extra={NFD_E: NFD_E}),
    ),
    "stop NFC vs NFD": (sampled(stop=(NFC_E,)), sampled(stop=(NFD_E,))),
    "schema NFC vs NFD": (
        sampled(response_format=ResponseFormat(FormatType.REGEX, NFC_E)),
        sampled(response_format=ResponseFormat(FormatType.REGEX, NFD_E)),
    ),
    "stop order (the first match wins)": (sampled(stop=("ab", "b")), sampled(stop=("b", "ab"))),
    "stop duplicates": (sampled(stop=("\n",)), sampled(stop=("\n", "\n"))),
    "0.1+0.2 vs 0.3": (sampled(temperature=0.1 + 0.2), sampled(temperature=0.3)),
    "temperature 0 vs 0 with repetition_penalty 1.0": (
        sampled(temperature=0.0),
        sampled(temperature=0.0, repetition_penalty=1.0),
    ),
    "top_k -1 vs 0": (sampled(top_k=-1), sampled(top_k=0)),
    "top_k -1 vs unset": (sampled(top_k=-1), sampled()),
    "top_k 0 vs unset": (sampled(top_k=0), sampled()),
    "seeded temperature unset vs 1.0": (sampled(seed=1), sampled(seed=1, temperature=1.0)),
    "ignore_eos false vs unset": (sampled(ignore_eos=False), sampled()),
    "response_format text vs unset": (sampled(response_format=ResponseFormat()), sampled()),
    "response_format text with a schema": (
        sampled(response_format=ResponseFormat()),
        sampled(response_format=ResponseFormat(FormatType.TEXT, "x")),
    ),
    "JSON schema property order": (
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, SCHEMA_A)),
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, SCHEMA_B)),
    ),
    "JSON schema whitespace": (
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, SCHEMA_A)),
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, " " + SCHEMA_A)),
    ),
    "chat content null vs empty": (
        chat(ChatMessage("assistant", None)),
        chat(ChatMessage("assistant", "")),
    ),
    "chat reasoning unset vs empty": (
        chat(ChatMessage("assistant", "x")),
        chat(ChatMessage("assistant", "x", reasoning_content="")),
    ),
    "chat content string vs one text part": (
        chat(ChatMessage("user", "x")),
        chat(ChatMessage("user", parts=(ContentPart(PartKind.TEXT, text="x"),))),
    ),
    "tools order": (
        dataclasses.replace(BASE, tools=('{"a":1}', '{"b":2}')),
        dataclasses.replace(BASE, tools=('{"b":2}', '{"a":1}')),
    ),
    "tool key order": (
        dataclasses.replace(BASE, tools=('{"a":1,"b":2}',)),
        dataclasses.replace(BASE, tools=('{"b":2,"a":1}',)),
    ),
}


@pytest.mark.parametrize("case", sorted(DISTINCT))
def test_requests_an_engine_may_answer_differently_never_share_a_digest(case: str) -> None:
    """When in doubt, different: exact bytes, unset apart from every default, order kept."""
    a, b = DISTINCT[case]
    assert digest(a) != digest(b)


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
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "length_penalty": 1.0,
    "best_of": 1,
    "use_beam_search": False,
    "return_logprobs": False,
}


@pytest.mark.parametrize(("name", "value"), sorted(DEFAULTS.items()))
def test_explicit_default_differs_from_unset(name: str, value: Any) -> None:
    """Unset is not a default (vLLM takes unset fields from generation_config.json):
    sending a field's usual default is another key than leaving it out."""
    assert digest(sampled(**{name: value})) != digest(BASE)


def test_default_model_version_fills_an_empty_one() -> None:
    """An empty model_version takes the pod's default; an explicit one wins over it."""
    implicit = build_key(dataclasses.replace(BASE, model_version=""), default_model_version="fp1")
    explicit = build_key(dataclasses.replace(BASE, model_version="fp1"))
    assert implicit.digest == explicit.digest
    assert implicit.model_version == "fp1"
    other = build_key(dataclasses.replace(BASE, model_version="fp2"), default_model_version="fp1")
    assert other.model_version == "fp2"
    assert other.digest != explicit.digest


def test_key_dimensions_are_reported_as_sent() -> None:
    """CacheKey exposes the dimensions exactly as sent (invalidation matches the same bytes)."""
    key = build_key(dataclasses.replace(BASE, tenant=NFD_E, prompt_version=KELVIN))
    assert key.tenant == NFD_E
    assert key.prompt_version == KELVIN


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


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _record(tag: int, data: bytes) -> bytes:
    return struct.pack(">HI", tag, len(data)) + data


def test_material_layout_of_schema_v2() -> None:
    """The v2 material, spelled out here byte by byte (independently of keys.py): magic,
    version 2, the four dimensions, the input's kind and digest, then one tagged record
    per field that is set (temperature 0.0 as its double; tools as the digest of their
    length-prefixed JSON texts); nothing for the fields left unset."""
    tool = '{"type":"function","function":{"name":"f"}}'
    req = dataclasses.replace(BASE, sampling=Sampling(temperature=0.0), tools=(tool,))
    text = b"How do I reset my password?"
    expected = (
        b"ICK\x02"
        + b"".join(_lp(d.encode()) for d in ("acme", "fp1-3f9a", "", "support-v3"))
        + _lp(struct.pack(">I", 1))
        + _lp(hashlib.sha256(text).digest())
        + _record(1, struct.pack(">d", 0.0))
        + _record(101, hashlib.sha256(_lp(tool.encode())).digest())
    )
    key = build_key(req)
    assert key.material == expected
    assert key.digest == hashlib.sha256(expected).digest()


def test_digest_is_pinned_for_this_schema_version() -> None:
    """The encoding of schema v2 is stable: fleets of mixed versions must agree on digests.
    (v1 entries are simply misses: their material starts with another version byte.)"""
    assert KEY_SCHEMA_VERSION == 2
    assert digest(BASE).hex() == GOLDEN_V2


GOLDEN_V2 = "f95d27394bd995ca2b3ab422589be2d662e94a94a3539ce20075bb93eba756de"


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
        (dataclasses.replace(BASE, extra={"\ud800": "2"}), "key.extra"),
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
        "surrogate-extra-key",
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


LONE = "\ud800"  # a lone surrogate: a Python str, not valid Unicode (no UTF-8 form)
ESCAPED = '{"a": "\\ud800"}'  # valid UTF-8 JSON text whose string is a lone surrogate


def _with_message(**fields: Any) -> KeyRequest:
    return chat(ChatMessage("user", **fields))


INVALID_UNICODE: dict[str, tuple[KeyRequest, str]] = {
    "tenant": (dataclasses.replace(BASE, tenant="a" + LONE), "key.tenant"),
    "model_version": (dataclasses.replace(BASE, model_version=LONE), "key.model_version"),
    "adapter_version": (dataclasses.replace(BASE, adapter_version=LONE), "key.adapter_version"),
    "prompt_version": (dataclasses.replace(BASE, prompt_version=LONE), "key.prompt_version"),
    "text": (dataclasses.replace(BASE, input="hi" + LONE), "key.text"),
    "chat content": (_with_message(content=LONE), "key.chat.messages[0].content"),
    "chat name": (_with_message(content="x", name=LONE), "key.chat.messages[0].name"),
    "chat part text": (
        _with_message(parts=(ContentPart(PartKind.TEXT, text=LONE),)),
        "key.chat.messages[0].parts[0].text",
    ),
    "chat tool call arguments": (
        _with_message(content="", tool_calls=(ToolCall("c", "f", LONE),)),
        "key.chat.messages[0].tool_calls[0].arguments",
    ),
    "stop": (sampled(stop=(LONE,)), "key.sampling.stop[0]"),
    "bad_words": (sampled(bad_words=("ok", LONE)), "key.sampling.bad_words[1]"),
    "extra value": (dataclasses.replace(BASE, extra={"k": LONE}), "key.extra['k']"),
    "regex schema": (
        sampled(response_format=ResponseFormat(FormatType.REGEX, LONE)),
        "key.sampling.response_format.schema",
    ),
    "json schema escape": (
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, ESCAPED)),
        "key.sampling.response_format.schema",
    ),
    "json schema raw": (
        sampled(response_format=ResponseFormat(FormatType.JSON_SCHEMA, '{"a": "' + LONE + '"}')),
        "key.sampling.response_format.schema",
    ),
    "guided json escape": (
        sampled(guided=GuidedDecoding(json=ESCAPED)),
        "key.sampling.guided.json",
    ),
    "guided choice": (sampled(guided=GuidedDecoding(choice=(LONE,))), "key.sampling.guided.choice"),
    "tool escape": (dataclasses.replace(BASE, tools=(ESCAPED,)), "key.tools[0]"),
    "tool_choice": (dataclasses.replace(BASE, tool_choice=LONE), "key.tool_choice"),
    "chat_template_kwargs escape": (
        dataclasses.replace(BASE, chat_template=ChatTemplateOptions(chat_template_kwargs=ESCAPED)),
        "key.chat_template.chat_template_kwargs",
    ),
    "output suffix": (
        dataclasses.replace(BASE, output=OutputOptions(suffix=LONE)),
        "key.output.suffix",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID_UNICODE))
def test_invalid_unicode_is_refused_naming_the_field(case: str) -> None:
    """A lone surrogate, raw or JSON-escaped, is INVALID_ARGUMENT naming the field (schema v1
    crashed with UnicodeEncodeError, which the API answered UNKNOWN)."""
    req, field = INVALID_UNICODE[case]
    with pytest.raises(InvalidArgument) as err:
        build_key(req)
    assert err.value.field.startswith(field), err.value.field
    assert "Unicode" in err.value.problem


MALFORMED_SURFACE: dict[str, tuple[KeyRequest, str]] = {
    "content and parts": (
        _with_message(content="x", parts=(ContentPart(PartKind.TEXT, text="x"),)),
        "key.chat.messages[0].parts",
    ),
    "media digest length": (
        _with_message(parts=(ContentPart(PartKind.IMAGE, sha256=b"short"),)),
        "key.chat.messages[0].parts[0].sha256",
    ),
    "tool not JSON": (dataclasses.replace(BASE, tools=("{",)), "key.tools[0]"),
    "chat_template_kwargs not JSON": (
        dataclasses.replace(BASE, chat_template=ChatTemplateOptions(chat_template_kwargs="x")),
        "key.chat_template.chat_template_kwargs",
    ),
    "documents not JSON": (
        dataclasses.replace(BASE, chat_template=ChatTemplateOptions(documents="[")),
        "key.chat_template.documents",
    ),
    "audio not JSON": (
        dataclasses.replace(BASE, output=OutputOptions(audio="wav")),
        "key.output.audio",
    ),
    "guided json not JSON": (
        sampled(guided=GuidedDecoding(json="{")),
        "key.sampling.guided.json",
    ),
    "dimensions zero": (
        dataclasses.replace(BASE, output=OutputOptions(dimensions=0)),
        "key.output.dimensions",
    ),
    "allowed token id out of range": (
        sampled(allowed_token_ids=(2**31,)),
        "key.sampling.allowed_token_ids",
    ),
    "top_logprobs negative": (sampled(top_logprobs=-1), "key.sampling.top_logprobs"),
    "best_of zero": (sampled(best_of=0), "key.sampling.best_of"),
    "length_penalty nan": (sampled(length_penalty=float("nan")), "key.sampling.length_penalty"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_SURFACE))
def test_malformed_request_surface_is_refused(case: str) -> None:
    """Bad values in the OpenAI / vLLM surface are INVALID_ARGUMENT naming the field."""
    req, field = MALFORMED_SURFACE[case]
    with pytest.raises(InvalidArgument) as err:
        build_key(req)
    assert err.value.field.startswith(field), err.value.field


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
    max_tools=1,
    max_tool_chars=12,
    max_json_chars=12,
    max_parts=1,
    max_tool_calls=1,
    max_choices=1,
    max_allowed_token_ids=2,
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
    "tools": (
        dataclasses.replace(SHORT, tools=("{}",)),
        dataclasses.replace(SHORT, tools=("{}", "{}")),
        "key.tools",
    ),
    "tool chars": (
        dataclasses.replace(SHORT, tools=('{"a":"' + "x" * 4 + '"}',)),
        dataclasses.replace(SHORT, tools=('{"a":"' + "x" * 5 + '"}',)),
        "key.tools[0]",
    ),
    "tool_choice chars": (
        dataclasses.replace(SHORT, tool_choice="x" * 12),
        dataclasses.replace(SHORT, tool_choice="x" * 13),
        "key.tool_choice",
    ),
    "chat_template_kwargs chars": (
        dataclasses.replace(
            SHORT, chat_template=ChatTemplateOptions(chat_template_kwargs='{"a":"' + "x" * 4 + '"}')
        ),
        dataclasses.replace(
            SHORT, chat_template=ChatTemplateOptions(chat_template_kwargs='{"a":"' + "x" * 5 + '"}')
        ),
        "key.chat_template.chat_template_kwargs",
    ),
    "parts": (
        chat(ChatMessage("u", parts=(ContentPart(PartKind.TEXT, text="a"),)), base=SHORT),
        chat(ChatMessage("u", parts=(ContentPart(PartKind.TEXT, text="a"),) * 2), base=SHORT),
        "key.chat.messages[0].parts",
    ),
    "tool calls": (
        chat(ChatMessage("u", tool_calls=(ToolCall("i", "f", "{}"),)), base=SHORT),
        chat(ChatMessage("u", tool_calls=(ToolCall("i", "f", "{}"),) * 2), base=SHORT),
        "key.chat.messages[0].tool_calls",
    ),
    "chat bytes with tool arguments and reasoning": (
        chat(
            ChatMessage("u", "ab", tool_calls=(ToolCall("i", "f", "cd"),), reasoning_content="ef"),
            base=SHORT,
        ),
        chat(
            ChatMessage("u", "ab", tool_calls=(ToolCall("i", "f", "cd"),), reasoning_content="efg"),
            base=SHORT,
        ),
        "key.chat",
    ),
    "choices": (
        short_sampled(guided=GuidedDecoding(choice=("a",))),
        short_sampled(guided=GuidedDecoding(choice=("a", "b"))),
        "key.sampling.guided.choice",
    ),
    "allowed token ids": (
        short_sampled(allowed_token_ids=(1, 2)),
        short_sampled(allowed_token_ids=(1, 2, 3)),
        "key.sampling.allowed_token_ids",
    ),
    "bad words": (
        short_sampled(bad_words=("a", "b")),
        short_sampled(bad_words=("a", "b", "c")),
        "key.sampling.bad_words",
    ),
    "bad word chars": (
        short_sampled(bad_words=("abcd",)),
        short_sampled(bad_words=("abcde",)),
        "key.sampling.bad_words[0]",
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
    "length_penalty",
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
def test_permuting_sets_and_maps_never_changes_the_digest(req: KeyRequest, rnd: Any) -> None:
    """Stop token ids, bad words, allowed token ids, extra and logit_bias are sets/maps:
    their order never matters (stop strings are a sequence: see DISTINCT)."""
    s = req.sampling
    ids, words, allowed = list(s.stop_token_ids), list(s.bad_words), list(s.allowed_token_ids)
    extra, bias = list(req.extra.items()), list(s.logit_bias.items())
    for items in (ids, words, allowed, extra, bias):
        rnd.shuffle(items)
    permuted = dataclasses.replace(
        req,
        extra=dict(extra),
        sampling=dataclasses.replace(
            s,
            stop_token_ids=tuple(ids),
            bad_words=tuple(words),
            allowed_token_ids=tuple(allowed),
            logit_bias=dict(bias),
        ),
    )
    assert digest(permuted) == digest(req)
