"""A Responses API body (`POST /v1/responses`) as the KeyRequest it is cached under
(docs/keys.md, "Responses"), read as vLLM reads it.

The same rules as chat (wire/openai/keys.py): every field keyed in its own key field,
keyed in `extra` under its name, excluded (transport, routing), or unknown (keyed in
`extra` and reported); a field sent as null or empty is keyed apart from one left out.
Unlike chat, `metadata`, `user` and `service_tier` are keyed: vLLM echoes them in the
answer, so a hit must hold the caller's own.

A request that depends on what the model server keeps between requests is forwarded
uncached (`KeyedRequest.uncacheable` says why): `previous_response_id`,
`conversation`, `background: true`, a stored `prompt`, `store: true` (a hit's response
would never be stored there for later retrieval), an `item_reference` input item, and
media named by URL or file id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.keys import ChatTemplateOptions, InputKind, KeyRequest
from sidecar.wire import values as v
from sidecar.wire.errors import bad_request
from sidecar.wire.openai.chat import Uncacheable
from sidecar.wire.openai.keys import MODEL_EXTRA, RULES_EXTRA, KeyedRequest, tool_choice
from sidecar.wire.openai.responses_input import input_messages
from sidecar.wire.openai.sampling import sampling

RESPONSES = "responses"
"""The endpoint (`KeyRequest.endpoint`) of /v1/responses requests."""
RESPONSES_PATH = "/v1/responses"
RULES_VERSION = "responses-2026-12-03"
"""`extra[RULES_EXTRA]` on every Responses key: raised whenever this module's table
changes (see wire/openai/keys.py RULES_VERSION)."""

EXCLUDED = frozenset(
    {
        "stream",
        "stream_options",  # include_obfuscation: OpenAI's padding; vLLM ignores it
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "session_id",  # vLLM's scheduling and routing hint
        "request_id",  # a string only (see `_excluded`)
        "store",  # false or absent only (true is not cached)
    }
)
"""Fields that never shape the answer: left out of the key."""

SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "include_stop_str_in_output": "include_stop_str_in_output",
    "logit_bias": "logit_bias",
    "top_logprobs": "top_logprobs",
    "max_output_tokens": "max_tokens",
    "structured_outputs": "structured_outputs",
}
"""Body field -> the Sampling reader's name for it (wire/openai/sampling.py)."""
_TEMPLATE = ("chat_template_kwargs", "mm_processor_kwargs")
KNOWN = frozenset(
    {"model", "input", "tools", "tool_choice", "parallel_tool_calls", *SAMPLING_FIELDS, *_TEMPLATE}
)
"""Fields with a key field of their own."""

EXTRA_KNOWN = frozenset(
    {
        "instructions",
        "text",  # format (json_schema, json_object, text) and verbosity, as sent
        "reasoning",
        "include",
        "include_reasoning",
        "truncation",
        "max_tool_calls",
        "enable_response_messages",
        "previous_input_messages",
        "metadata",
        "user",
        "service_tier",
        "background",
        "previous_response_id",
        "conversation",
        "prompt",
        "watermarking",
        "vllm_xargs",
        "media_io_kwargs",
        "mm_payload",
        "return_mm_kwargs",
        "priority",
        "cache_salt",
        "kv_transfer_params",
        "ec_transfer_params",
    }
)
"""Known fields keyed by the extra rule (not reported as unknown)."""

STATEFUL = (
    ("previous_response_id", "continues a response stored on the model server"),
    ("conversation", "continues a conversation stored on the model server"),
    ("prompt", "names a stored prompt template"),
    ("kv_transfer_params", "one half of a disaggregated prefill/decode pair"),
    ("ec_transfer_params", "one half of a disaggregated encoder/decode pair"),
)
"""Fields whose non-null value makes a request uncacheable, and why."""


def responses_request(doc: Mapping[str, Any], tenant: str, prompt_version: str) -> KeyedRequest:
    """The key of a parsed /v1/responses body; WireError for a wrong type, `key` None
    for a request that cannot be keyed safely (see the module docstring)."""
    model = v.string(doc, "model")
    if not model:
        raise bad_request("model", "is required and must be a non-empty string")
    stream = bool(v.boolean(doc, "stream"))
    if RULES_EXTRA in doc:
        why = f"`{RULES_EXTRA}` is the name of the gateway's own key entry"
        return KeyedRequest(None, model, stream, False, (RULES_EXTRA,), why)
    extra: dict[str, str] = {MODEL_EXTRA: model, RULES_EXTRA: RULES_VERSION}
    unknown = []
    for name, value in doc.items():
        if name in EXCLUDED:
            if name == "request_id" and not isinstance(value, str):
                extra[name] = v.extra_value(value)  # vLLM refuses it: keyed
            continue
        if name in KNOWN:
            if name == "input":
                continue
            if value is None:
                extra[name] = "null"  # vLLM applies a default only to an absent field
            elif not value and isinstance(value, list | dict):
                extra[name] = v.extra_value(value)  # empty is not absent either
            continue
        if name not in EXTRA_KNOWN:
            unknown.append(name)
        extra[name] = v.extra_value(value)
    unknown_fields = tuple(sorted(unknown))
    why = _uncacheable(doc)
    if why:
        return KeyedRequest(None, model, stream, False, unknown_fields, why)
    try:
        kind, value = _input(doc, extra)
    except Uncacheable as exc:
        return KeyedRequest(None, model, stream, False, unknown_fields, exc.reason)
    v.integer(doc, "max_output_tokens")  # a 400 names it, not the reader's max_tokens
    named = {key: doc[name] for name, key in SAMPLING_FIELDS.items() if name in doc}
    key = KeyRequest(
        tenant=tenant,
        model_version="",  # the pod's fingerprint (KeyResolver fills it in)
        prompt_version=prompt_version,
        input=value,
        input_kind=kind,
        sampling=sampling(named, extra),
        extra=extra,
        tools=tuple(v.dumps(t) for t in v.objects(doc, "tools")),
        tool_choice=tool_choice(doc, extra),
        parallel_tool_calls=v.boolean(doc, "parallel_tool_calls"),
        chat_template=_template(doc),
        endpoint=RESPONSES,
    )
    return KeyedRequest(key, model, stream, False, unknown_fields)


def _uncacheable(doc: Mapping[str, Any]) -> str:
    """Why the request depends on state the model server keeps ("" when it does not)."""
    for name, what in STATEFUL:
        if doc.get(name) is not None:
            return f"`{name}` {what}"
    if v.boolean(doc, "background"):
        return "`background: true` is answered later, from the model server's store"
    if v.boolean(doc, "store"):
        return "`store: true` asks the model server to keep the response for retrieval"
    return ""


def _input(doc: Mapping[str, Any], extra: dict[str, str]) -> tuple[InputKind, Any]:
    raw = doc.get("input")
    if isinstance(raw, str):
        return InputKind.TEXT, raw
    if isinstance(raw, list):
        return InputKind.CHAT, input_messages(raw, extra)
    raise bad_request("input", "is required: a string or an array of input items")


def _template(doc: Mapping[str, Any]) -> ChatTemplateOptions | None:
    kwargs, mm_kwargs = (v.json_of(doc, n) for n in _TEMPLATE)
    if kwargs is None and mm_kwargs is None:
        return None
    return ChatTemplateOptions(chat_template_kwargs=kwargs, mm_processor_kwargs=mm_kwargs)
