"""An OpenAI / vLLM request body as the KeyRequest it is cached under (docs/keys.md).

Every field of the body is one of: keyed in its own key field, keyed in `extra`
under its name (known output-shaping fields without a key field of their own),
excluded (transport, accounting, routing), or unknown. An unknown field is keyed in
`extra` too, so it can never merge two requests, and reported (`unknown`).
The tenant and the prompt version never come from the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.gateway import values as v
from sidecar.gateway.chat import Uncacheable, chat_messages
from sidecar.gateway.errors import bad_request
from sidecar.keys import (
    ChatTemplateOptions,
    FormatType,
    GuidedDecoding,
    InputKind,
    KeyRequest,
    OutputOptions,
    ResponseFormat,
    Sampling,
)
from sidecar.policy.cacheability import NO_TRAITS, RequestTraits

CHAT = "chat.completions"
COMPLETIONS = "completions"
EMBEDDINGS = "embeddings"

MODEL_EXTRA = "model"
"""`extra` entry holding the served model name (model_version is the weights' fingerprint)."""

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
        "priority",
        "cache_salt",
        "kv_transfer_params",
    }
)
"""Fields that never shape the answer: left out of the key."""

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
    }
)
"""Known output-shaping fields keyed by the extra rule (not reported as unknown)."""

_SAMPLING_NUMBERS = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
    "length_penalty",
)
_SAMPLING_INTS = (
    "top_k",
    "max_tokens",
    "seed",
    "n",
    "min_tokens",
    "top_logprobs",
    "prompt_logprobs",
    "best_of",
    "truncate_prompt_tokens",
    "max_completion_tokens",
)
_SAMPLING_FLAGS = (
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "use_beam_search",
)
_GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "guided_whitespace_pattern": "whitespace_pattern",
    "guided_decoding_backend": "backend",
    "structural_tag": "structural_tag",
}
_STRUCTURED = {
    "json": "json",
    "regex": "regex",
    "choice": "choice",
    "grammar": "grammar",
    "json_object": "json_object",
    "structural_tag": "structural_tag",
    "whitespace_pattern": "whitespace_pattern",
    "disable_any_whitespace": "disable_any_whitespace",
    "disable_additional_properties": "disable_additional_properties",
    "disable_fallback": "disable_fallback",
}
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
_FORMATS = {
    "text": FormatType.TEXT,
    "json_object": FormatType.JSON_OBJECT,
    "json_schema": FormatType.JSON_SCHEMA,
    "structural_tag": FormatType.STRUCTURAL_TAG,
}
_INPUTS = {CHAT: "messages", COMPLETIONS: "prompt", EMBEDDINGS: "input"}
_OTHER_INPUTS = {e: tuple(sorted(set(_INPUTS.values()) - {n})) for e, n in _INPUTS.items()}
_INPUT_NAMES = frozenset(_INPUTS.values())

KNOWN = frozenset(
    {"model", "messages", "prompt", "input", "stop", "logit_bias", "logprobs", "bad_words"}
    | {"stop_token_ids", "allowed_token_ids", "response_format", "tools", "tool_choice"}
    | {"parallel_tool_calls", "structured_outputs", "chat_template", "documents", "echo"}
    | {"modalities", "dimensions", "return_tokens_as_token_ids"}
    | set(_SAMPLING_NUMBERS)
    | set(_SAMPLING_INTS)
    | set(_SAMPLING_FLAGS)
    | set(_GUIDED)
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

    400 (HttpError) for a wrong type; `key` is None for a request that cannot be keyed
    safely (remote media, several prompts in one request).
    """
    model = v.string(doc, "model")
    if not model:
        raise bad_request("model", "is required and must be a non-empty string")
    stream = bool(v.boolean(doc, "stream"))
    options = doc.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("stream_options", "must be an object")
    if options is not None and not stream:
        # As OpenAI and vLLM answer it: 400 whether or not an answer is cached.
        raise bad_request("stream_options", "is only allowed with stream: true")
    include_usage = bool(options and v.boolean(options, "include_usage", "stream_options."))
    extra: dict[str, str] = {MODEL_EXTRA: model}
    if options:
        # include_usage is framing the gateway rebuilds on a hit; any other option (vLLM's
        # continuous_usage_stats: usage in every chunk) shapes what a replay must hold.
        shaping = {k: x for k, x in options.items() if k != "include_usage"}
        if shaping:
            extra["stream_options"] = v.extra_value(shaping)
    unknown = []
    for name, value in doc.items():
        if name in EXCLUDED:
            continue
        if name in KNOWN:
            if not value and isinstance(value, list | dict) and name not in _INPUT_NAMES:
                # Sent empty: not the same as absent (templates test `tools is not none`),
                # while the field's own key record cannot tell the two apart.
                extra[name] = v.extra_value(value)
            continue
        if name not in EXTRA_KNOWN:
            unknown.append(name)
        extra[name] = v.extra_value(value)
    unknown_fields = tuple(sorted(unknown))
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
        sampling=_sampling(doc, extra),
        extra=extra,
        tools=tuple(v.dumps(t) for t in v.objects(doc, "tools")),
        tool_choice=_tool_choice(doc),
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


def _tool_choice(doc: Mapping[str, Any]) -> str | None:
    raw = doc.get("tool_choice")
    if raw is None or isinstance(raw, str):
        return raw
    if not isinstance(raw, dict):
        raise bad_request("tool_choice", "must be a string or an object")
    return v.dumps(raw)


def _sampling(doc: Mapping[str, Any], extra: dict[str, str]) -> Sampling:
    # Only the fields the body has (an absent one reads as None, Sampling's default),
    # checked in the same order, so a body with two bad fields gets the same 400.
    nums: dict[str, Any] = {n: v.number(doc, n) for n in _SAMPLING_NUMBERS if n in doc}
    ints: dict[str, Any] = {n: v.integer(doc, n) for n in _SAMPLING_INTS if n in doc}
    flags: dict[str, Any] = {n: v.boolean(doc, n) for n in _SAMPLING_FLAGS if n in doc}
    logprobs: int | None = None
    return_logprobs: bool | None = None
    if isinstance(doc.get("logprobs"), bool):
        return_logprobs = doc["logprobs"]
    else:
        logprobs = v.integer(doc, "logprobs")
    return Sampling(
        **nums,
        **ints,
        **flags,
        stop=v.strings(doc, "stop", single=True),
        stop_token_ids=v.integers(doc, "stop_token_ids"),
        allowed_token_ids=v.integers(doc, "allowed_token_ids"),
        bad_words=v.strings(doc, "bad_words"),
        logprobs=logprobs,
        return_logprobs=return_logprobs,
        logit_bias=_logit_bias(doc, extra),
        response_format=_response_format(doc),
        guided=_guided(doc, extra),
    )


def _logit_bias(doc: Mapping[str, Any], extra: dict[str, str]) -> dict[int, float]:
    raw = doc.get("logit_bias")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad_request("logit_bias", "must be an object of token id -> bias")
    out: dict[int, float] = {}
    for token in raw:
        try:
            tid = int(token)
        except ValueError:
            raise bad_request("logit_bias", f"{token!r} is not a token id") from None
        if str(tid) != token:
            # int() also reads " 12", "+12", "1_2" and other scripts' digits: whatever the
            # model server makes of such a spelling, it is not keyed as the plain id.
            extra["logit_bias"] = v.extra_value(raw)
        value = v.number(raw, token, "logit_bias.")
        if value is None:
            raise bad_request(f"logit_bias.{token}", "must be a number")
        if tid in out:
            raise bad_request("logit_bias", f"token {tid} appears twice")
        out[tid] = value
    return out


def _response_format(doc: Mapping[str, Any]) -> ResponseFormat | None:
    raw = doc.get("response_format")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise bad_request("response_format", "must be an object with a string `type`")
    kind = _FORMATS.get(raw["type"])
    if kind is None or set(raw) - {"type", "json_schema", "structural_tag", "format"}:
        # A format type or field this table does not know: keyed whole, as sent.
        return ResponseFormat(FormatType.UNSPECIFIED, schema=v.dumps(raw))
    if kind is FormatType.JSON_SCHEMA:
        js = raw.get("json_schema")
        if not isinstance(js, dict) or set(js) - {"schema", "name", "strict", "description"}:
            return ResponseFormat(FormatType.UNSPECIFIED, schema=v.dumps(raw))
        schema = js.get("schema")
        return ResponseFormat(
            kind,
            schema=v.dumps(schema) if schema is not None else "",
            name=v.string(js, "name", "response_format.json_schema."),
            strict=v.boolean(js, "strict", "response_format.json_schema."),
            description=v.string(js, "description", "response_format.json_schema."),
        )
    rest = {k: x for k, x in raw.items() if k != "type"}
    return ResponseFormat(kind, schema=v.dumps(rest) if rest else "")


def _guided(doc: Mapping[str, Any], extra: dict[str, str]) -> GuidedDecoding | None:
    found: dict[str, Any] = {}
    for name, attr in _GUIDED.items():
        if doc.get(name) is not None:
            found[attr] = _guided_value(attr, doc[name], name)
    so = doc.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise bad_request("structured_outputs", "must be an object")
        for so_name, value in so.items():
            so_attr = _STRUCTURED.get(so_name)
            if so_attr is None or so_attr in found:
                # Unknown, or given twice (guided_* and structured_outputs): keyed whole.
                extra["structured_outputs"] = v.extra_value(so)
                continue
            found[so_attr] = _guided_value(so_attr, value, f"structured_outputs.{so_name}")
    return GuidedDecoding(**found) if found else None


def _guided_value(attr: str, value: Any, name: str) -> Any:
    if attr == "choice":
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise bad_request(name, "must be an array of strings")
        return tuple(value)
    if attr in ("json", "structural_tag"):
        return value if isinstance(value, str) else v.dumps(value)
    if attr.startswith("disable_") or attr == "json_object":
        if not isinstance(value, bool):
            raise bad_request(name, "must be a boolean")
        return value
    if not isinstance(value, str):
        raise bad_request(name, "must be a string")
    return value


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
