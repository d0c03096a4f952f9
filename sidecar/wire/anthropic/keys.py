"""An Anthropic Messages request body as the KeyRequest it is cached under (docs/keys.md,
"Messages").

vLLM 0.32 turns a Messages request into a chat completion (vllm/entrypoints/anthropic/
serving.py): `system` and `messages` into chat messages, `stop_sequences` into `stop`,
`max_tokens`, `temperature`, `top_p`, `top_k` as they are, `tools` and `tool_choice`
into function tools, `thinking` and `output_config` into a thinking budget, a reasoning
effort and a response format. Each body field is keyed in its own key field, keyed in
`extra` under its name, excluded (`metadata`, `stream`: never read into the answer), or
unknown: keyed in `extra` too, and reported. A known field sent as null, or as an empty
array or object, is also keyed in `extra` (null is not absent). The endpoint is
`messages`, so a Messages answer never answers a chat request of the same prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.keys import ChatTemplateOptions, InputKind, KeyRequest, Sampling
from sidecar.wire import values as v
from sidecar.wire.anthropic.content import HINT, messages, system_value, without_hint
from sidecar.wire.errors import bad_request
from sidecar.wire.openai.chat import Uncacheable
from sidecar.wire.openai.keys import MODEL_EXTRA, RULES_EXTRA, KeyedRequest

MESSAGES = "messages"
"""The endpoint of a Messages request (the key's `endpoint`)."""
MESSAGES_PATH = "/v1/messages"

RULES_VERSION = "2026-12-20.messages"
"""`extra[RULES_EXTRA]` on every Messages key: raised whenever this table changes."""

EXCLUDED = frozenset({"stream", "metadata", HINT})
"""Never shape the answer: `stream` is framing (replayed either way); vLLM reads
`metadata` (user_id) into its model and never uses it; a top-level `cache_control` is not
a field vLLM declares (ignored, as on blocks and tools)."""

UNCACHED = ("kv_transfer_params", "ec_transfer_params")
"""Not null: one half of a disaggregated pair (vLLM reads the prompt or the encoder
output from the handles inside): forwarded uncached."""

EXTRA_KNOWN = frozenset(
    {
        "system",
        "thinking",
        "output_config",
        "cache_salt",
        "watermarking",
        "vllm_xargs",
        "mm_payload",
        "return_mm_kwargs",
        *UNCACHED,
    }
)
"""Known fields keyed in `extra` under their name (not reported as unknown)."""

_INTS = ("max_tokens", "top_k")
_NUMBERS = ("temperature", "top_p")
KNOWN = frozenset(
    {"model", "messages", "stop_sequences", "tools", "tool_choice", "chat_template_kwargs"}
    | set(_INTS)
    | set(_NUMBERS)
)
"""Fields with a key field of their own."""


def keyed_message_request(doc: Mapping[str, Any], tenant: str, prompt_version: str) -> KeyedRequest:
    """The key of a parsed Messages body; WireError for a wrong type or a missing
    required field, `key` None for a request that cannot be keyed safely."""
    model = v.string(doc, "model")
    if not model:
        raise bad_request("model", "is required and must be a non-empty string")
    stream = bool(v.boolean(doc, "stream"))
    if doc.get("max_tokens") is None:
        raise bad_request("max_tokens", "is required")
    if RULES_EXTRA in doc:
        why = f"`{RULES_EXTRA}` is the name of the gateway's own key entry"
        return KeyedRequest(None, model, stream, False, (RULES_EXTRA,), why)
    extra: dict[str, str] = {MODEL_EXTRA: model, RULES_EXTRA: RULES_VERSION}
    unknown = []
    for name, value in doc.items():
        if name in EXCLUDED:
            continue
        if name in KNOWN:
            if value is None and name != "messages":
                extra[name] = "null"
            elif not value and isinstance(value, list | dict) and name != "messages":
                extra[name] = v.extra_value(value)
            continue
        if name not in EXTRA_KNOWN:
            unknown.append(name)
        if name != "system":
            extra[name] = v.extra_value(value)
    unknown_fields = tuple(sorted(unknown))
    for name in UNCACHED:
        if doc.get(name) is not None:
            why = f"`{name}`: one half of a disaggregated pair"
            return KeyedRequest(None, model, stream, False, unknown_fields, why)
    try:
        if "system" in doc:
            raw = doc["system"]
            extra["system"] = "null" if raw is None else v.extra_value(system_value(raw))
        chat = messages(doc.get("messages"), extra)
    except Uncacheable as exc:
        return KeyedRequest(None, model, stream, False, unknown_fields, exc.reason)
    key = KeyRequest(
        tenant=tenant,
        model_version="",  # the pod's fingerprint (KeyResolver fills it in)
        prompt_version=prompt_version,
        input=chat,
        input_kind=InputKind.CHAT,
        sampling=_sampling(doc),
        extra=extra,
        tools=_tools(doc),
        tool_choice=_tool_choice(doc, extra),
        endpoint=MESSAGES,
        chat_template=_template(doc),
    )
    return KeyedRequest(key, model, stream, False, unknown_fields)


def _sampling(doc: Mapping[str, Any]) -> Sampling:
    nums: dict[str, Any] = {n: v.number(doc, n) for n in _NUMBERS}
    ints: dict[str, Any] = {n: v.integer(doc, n) for n in _INTS}
    if ints["max_tokens"] is not None and ints["max_tokens"] < 1:
        raise bad_request("max_tokens", "must be at least 1")
    return Sampling(**nums, **ints, stop=v.strings(doc, "stop_sequences"))


def _tools(doc: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(v.dumps(without_hint(t)) for t in v.objects(doc, "tools"))


def _tool_choice(doc: Mapping[str, Any], extra: dict[str, str]) -> str | None:
    raw = doc.get("tool_choice")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise bad_request("tool_choice", "must be an object with a string `type`")
    extra["tool_choice"] = "object"
    return v.dumps(raw)


def _template(doc: Mapping[str, Any]) -> ChatTemplateOptions | None:
    kwargs = v.json_of(doc, "chat_template_kwargs")
    return None if kwargs is None else ChatTemplateOptions(chat_template_kwargs=kwargs)
