"""A request body's sampling fields as the key's Sampling (docs/keys.md): the numbers,
integers and flags, stop strings and token sets, logit_bias, response_format and
structured_outputs. request_keys.py calls `sampling` for every endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.keys import FormatType, GuidedDecoding, ResponseFormat, Sampling
from sidecar.wire import values as v
from sidecar.wire.errors import bad_request

SAMPLING_NUMBERS = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
    "length_penalty",
)
SAMPLING_INTS = (
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
SAMPLING_FLAGS = (
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "use_beam_search",
)
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
_FORMATS = {
    "text": FormatType.TEXT,
    "json_object": FormatType.JSON_OBJECT,
    "json_schema": FormatType.JSON_SCHEMA,
    "structural_tag": FormatType.STRUCTURAL_TAG,
}


def sampling(doc: Mapping[str, Any], extra: dict[str, str]) -> Sampling:
    """The body's sampling fields (docs/keys.md), WireError for a wrong type; what
    their key fields cannot hold goes into `extra`."""
    # Only the fields the body has (an absent one reads as None, Sampling's default),
    # checked in the same order, so a body with two bad fields gets the same 400.
    nums: dict[str, Any] = {n: v.number(doc, n) for n in SAMPLING_NUMBERS if n in doc}
    ints: dict[str, Any] = {n: v.integer(doc, n) for n in SAMPLING_INTS if n in doc}
    flags: dict[str, Any] = {n: v.boolean(doc, n) for n in SAMPLING_FLAGS if n in doc}
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
    so = doc.get("structured_outputs")
    if so is None:
        return None
    if not isinstance(so, dict):
        raise bad_request("structured_outputs", "must be an object")
    found: dict[str, Any] = {}
    for so_name, value in so.items():
        so_attr = _STRUCTURED.get(so_name)
        if (
            so_attr is None
            or value is None
            or (so_attr == "structural_tag" and not isinstance(value, str))
        ):
            # Unknown; null (not the same as absent); or a structural tag given as an
            # object (its key field holds text, as vLLM takes it): keyed whole.
            extra["structured_outputs"] = v.extra_value(so)
            if so_attr is None or value is None:
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
