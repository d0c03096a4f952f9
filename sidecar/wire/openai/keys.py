"""An OpenAI / vLLM request body as the KeyRequest it is cached under (docs/keys.md).

Every field of the body is one of: keyed in its own key field, keyed in `extra`
under its name (known output-shaping fields without a key field of their own),
excluded (transport, accounting, routing), or unknown. An unknown field is keyed in
`extra` too, so it can never merge two requests, and reported (`unknown`).
The tenant and the prompt version never come from the body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.keys import ChatTemplateOptions, InputKind, KeyRequest, OutputOptions
from sidecar.policy.cacheability import NO_TRAITS, RequestTraits
from sidecar.wire import values as v
from sidecar.wire.errors import bad_request
from sidecar.wire.openai.chat import Uncacheable, chat_messages
from sidecar.wire.openai.routes import CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH
from sidecar.wire.openai.sampling import (
    SAMPLING_FLAGS,
    SAMPLING_INTS,
    SAMPLING_NUMBERS,
    sampling,
)

CHAT = "chat.completions"
COMPLETIONS = "completions"
EMBEDDINGS = "embeddings"
PATH_ENDPOINTS = {CHAT_PATH: CHAT, COMPLETIONS_PATH: COMPLETIONS, EMBEDDINGS_PATH: EMBEDDINGS}
"""The endpoint each route of the API keys its requests for."""

MODEL_EXTRA = "model"
"""`extra` entry holding the served model name (model_version is the weights' fingerprint)."""

RULES_EXTRA = "infercache_key_rules"
RULES_VERSION = "2026-12-02"
"""`extra[RULES_EXTRA]`, on every gateway key: the version of this module's request ->
key table (docs/keys.md). Raised whenever the table changes, so that during a rolling
upgrade an entry a pod stored under other rules (where two requests this table keeps
apart keyed alike) is never served here. A body field of that name is not cached."""

EXCLUDED = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "safety_identifier",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "request_id",
        "kv_transfer_params",  # null only: any other value is not cached (DISAGGREGATED)
    }
)
"""Fields that never shape the answer: left out of the key (`request_id` only when it is
a string: vLLM refuses any other value, so that is keyed; see keyed_request)."""

DISAGGREGATED = "kv_transfer_params"
"""A request carrying it is one half of a disaggregated prefill/decode pair: vLLM's
decode side reads its prompt from inside it, and a prefill's answer is a stub holding
one-use transfer handles. Such requests are forwarded uncached."""

EXTRA_KNOWN = frozenset(
    {
        "logits_processors",
        "vllm_xargs",
        "return_token_ids",
        "media_io_kwargs",
        "use_activation",
        "normalize",
        "embed_dtype",
        "functions",
        "function_call",
        # Not output-shaping, but vLLM refuses some values (a salt with `/`, a priority on
        # a server without priority scheduling): keyed, so a cached 200 never answers
        # what the model server would refuse.
        "priority",
        "cache_salt",
        # vLLM before 0.12 read these as structured_outputs.*; since then it ignores them
        # (the model answers unconstrained). Keyed by name as sent, never merged with
        # structured_outputs.
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_whitespace_pattern",
        "guided_decoding_backend",
        "structural_tag",
    }
)
"""Known fields keyed by the extra rule (not reported as unknown)."""

_TEMPLATE_FLAGS = ("add_generation_prompt", "continue_final_message", "add_special_tokens")
_TEMPLATE_JSON = ("chat_template_kwargs", "mm_processor_kwargs")
_OUTPUT_TEXT = ("reasoning_effort", "verbosity", "suffix", "encoding_format")
_OUTPUT_JSON = ("audio", "prediction", "web_search_options")
_TEMPLATE_FIELDS = frozenset({*_TEMPLATE_FLAGS, *_TEMPLATE_JSON, "chat_template", "documents"})
"""Every field _template reads."""
_OUTPUT_FIELDS = frozenset(
    {*_OUTPUT_TEXT, *_OUTPUT_JSON, "echo", "dimensions", "return_tokens_as_token_ids", "modalities"}
)
"""Every field _output reads."""
_INPUTS = {CHAT: "messages", COMPLETIONS: "prompt", EMBEDDINGS: "input"}
_OTHER_INPUTS = {e: tuple(sorted(set(_INPUTS.values()) - {n})) for e, n in _INPUTS.items()}
_INPUT_NAMES = frozenset(_INPUTS.values())

KNOWN = frozenset(
    {"model", "messages", "prompt", "input", "stop", "logit_bias", "logprobs", "bad_words"}
    | {"stop_token_ids", "allowed_token_ids", "response_format", "tools", "tool_choice"}
    | {"parallel_tool_calls", "structured_outputs", "chat_template", "documents", "echo"}
    | {"modalities", "dimensions", "return_tokens_as_token_ids"}
    | set(SAMPLING_NUMBERS)
    | set(SAMPLING_INTS)
    | set(SAMPLING_FLAGS)
    | set(_TEMPLATE_FLAGS)
    | set(_TEMPLATE_JSON)
    | set(_OUTPUT_TEXT)
    | set(_OUTPUT_JSON)
)
"""Fields with a key field of their own."""


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """What the gateway caches a request under, and what it needs to serve it."""

    key: KeyRequest | None
    """None: not cacheable (`uncacheable` says why); it is forwarded as it is."""
    model: str
    stream: bool
    include_usage: bool
    unknown: tuple[str, ...] = ()
    """Body fields this gateway does not know (keyed in `extra`, reported)."""
    uncacheable: str = ""
    traits: RequestTraits = field(default=NO_TRAITS)


def keyed_request(
    endpoint: str, doc: Mapping[str, Any], tenant: str, prompt_version: str
) -> KeyedRequest:
    """The key of a parsed body for `endpoint` (CHAT, COMPLETIONS or EMBEDDINGS).

    WireError for a wrong type; `key` is None for a request that cannot be keyed
    safely (remote media, several prompts in one request).
    """
    model = v.string(doc, "model")
    if not model:
        raise bad_request("model", "is required and must be a non-empty string")
    stream = bool(v.boolean(doc, "stream"))
    options = doc.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("stream_options", "must be an object")
    if options and not stream:
        # As vLLM answers it (an empty object passes there): 400 whether or not an answer
        # is cached.
        raise bad_request("stream_options", "is only allowed with stream: true")
    include_usage = bool(options and v.boolean(options, "include_usage", "stream_options."))
    if RULES_EXTRA in doc:
        # It would take the rules' place in `extra`: never keyed, forwarded as it is.
        why = f"`{RULES_EXTRA}` is the name of the gateway's own key entry"
        return KeyedRequest(None, model, stream, include_usage, (RULES_EXTRA,), why)
    extra: dict[str, str] = {MODEL_EXTRA: model, RULES_EXTRA: RULES_VERSION}
    if options:
        # include_usage is framing the gateway rebuilds on a hit; any other option (vLLM's
        # continuous_usage_stats: usage in every chunk) shapes what a replay must hold.
        shaping = {k: x for k, x in options.items() if k != "include_usage"}
        if shaping:
            extra["stream_options"] = v.extra_value(shaping)
    unknown = []
    for name, value in doc.items():
        if name in EXCLUDED:
            if not isinstance(value, str) and name == "request_id":
                extra[name] = v.extra_value(value)
            continue
        if name in KNOWN:
            if value is None and name not in _INPUT_NAMES:
                # Sent as null: not the same as absent. vLLM applies a field's default only
                # when the field is absent (tools without tool_choice means "auto", null
                # means none; logprobs with top_logprobs null returns none), and refuses
                # null for a field that may not be null (echo, min_tokens, ...).
                extra[name] = "null"
            elif not value and isinstance(value, list | dict) and name not in _INPUT_NAMES:
                # Sent empty: not the same as absent (templates test `tools is not none`),
                # while the field's own key record cannot tell the two apart.
                extra[name] = v.extra_value(value)
            continue
        if name not in EXTRA_KNOWN:
            unknown.append(name)
        extra[name] = v.extra_value(value)
    unknown_fields = tuple(sorted(unknown))
    if doc.get(DISAGGREGATED) is not None:
        why = f"`{DISAGGREGATED}`: one half of a disaggregated prefill/decode pair"
        return KeyedRequest(None, model, stream, include_usage, unknown_fields, why)
    try:
        kind, value = _input(endpoint, doc, extra)
    except Uncacheable as exc:
        return KeyedRequest(None, model, stream, include_usage, unknown_fields, exc.reason)
    key = KeyRequest(
        tenant=tenant,
        model_version="",  # the pod's fingerprint (KeyResolver fills it in)
        prompt_version=prompt_version,
        input=value,
        input_kind=kind,
        sampling=sampling(doc, extra),
        extra=extra,
        tools=tuple(v.dumps(t) for t in v.objects(doc, "tools")),
        tool_choice=tool_choice(doc, extra),
        parallel_tool_calls=v.boolean(doc, "parallel_tool_calls"),
        chat_template=_template(doc),
        endpoint=endpoint,
        output=_output(endpoint, doc),
    )
    traits = RequestTraits(real_time=True) if doc.get("web_search_options") else NO_TRAITS
    return KeyedRequest(key, model, stream, include_usage, unknown_fields, traits=traits)


def _input(endpoint: str, doc: Mapping[str, Any], extra: dict[str, str]) -> tuple[InputKind, Any]:
    name = _INPUTS[endpoint]
    for other in _OTHER_INPUTS[endpoint]:
        if other in doc:
            extra[other] = v.extra_value(doc[other])  # another endpoint's input: keyed whole
    raw = doc.get(name)
    if endpoint == CHAT:
        return InputKind.CHAT, chat_messages(raw, extra)
    if isinstance(raw, str):
        return InputKind.TEXT, raw
    if isinstance(raw, list) and raw and all(v.is_int(i) for i in raw):
        return InputKind.TOKENS, tuple(int(i) for i in raw)
    if isinstance(raw, list) and raw:
        raise Uncacheable(f"`{name}` holds several inputs; only single inputs are cached")
    raise bad_request(name, "is required: a string or an array of token ids")


def tool_choice(doc: Mapping[str, Any], extra: dict[str, str]) -> str | None:
    """`tool_choice` as its key field: a string as sent, an object as its JSON (marked
    in `extra`, so it never keys like a string spelling the same JSON)."""
    raw = doc.get("tool_choice")
    if raw is None or isinstance(raw, str):
        return raw
    if not isinstance(raw, dict):
        raise bad_request("tool_choice", "must be a string or an object")
    # The key field holds text: a string spelling the object's JSON would key alike (and
    # vLLM refuses such a string). The object form is marked in `extra`.
    extra["tool_choice"] = "object"
    return v.dumps(raw)


def _template(doc: Mapping[str, Any]) -> ChatTemplateOptions | None:
    if _TEMPLATE_FIELDS.isdisjoint(doc):
        return None  # the common case; the same answer as reading each field as None
    found: dict[str, Any] = {n: v.boolean(doc, n) for n in _TEMPLATE_FLAGS}
    found |= {n: v.json_of(doc, n) for n in _TEMPLATE_JSON}
    found["chat_template"] = v.string(doc, "chat_template")
    found["documents"] = v.json_of(doc, "documents", (list,))
    if all(x is None for x in found.values()):
        return None
    return ChatTemplateOptions(**found)


def _output(endpoint: str, doc: Mapping[str, Any]) -> OutputOptions | None:
    if _OUTPUT_FIELDS.isdisjoint(doc):
        return None  # the common case; the same answer as reading each field as None
    found: dict[str, Any] = {n: v.string(doc, n) for n in _OUTPUT_TEXT}
    found |= {n: v.json_of(doc, n) for n in _OUTPUT_JSON}
    found["echo"] = v.boolean(doc, "echo")
    found["dimensions"] = v.integer(doc, "dimensions")
    found["return_tokens_as_token_ids"] = v.boolean(doc, "return_tokens_as_token_ids")
    modalities = v.strings(doc, "modalities")
    if all(x is None for x in found.values()) and not modalities:
        return None
    return OutputOptions(modalities=modalities, **found)


def for_adapter(kr: KeyedRequest, adapters: Mapping[str, str]) -> KeyedRequest:
    """`kr` with its key naming the adapter its `model` is, when the pod serves an adapter
    by that name (adapter name -> fingerprint, as configured): the resolver then keys
    that adapter's fingerprint, so new adapter weights are a MISS and an invalidation
    selecting the adapter matches. Any other model name is keyed as it is (`extra`)."""
    if kr.key is None or kr.model not in adapters:
        return kr
    return dataclasses.replace(kr, key=dataclasses.replace(kr.key, adapter_version=kr.model))
