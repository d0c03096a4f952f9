"""Cache keys: an injective encoding of every output-shaping dimension. When in doubt, different.

A key's *material* is a self-describing byte string: a magic, the schema version
byte, the four invalidation dimensions (length-prefixed), the input's kind and
digest, then one tagged, length-prefixed record per field that is *set*, in
ascending tag order. The digest is the full SHA-256 of the material. Length
prefixes make the encoding injective ("a:b" + "c" and "a" + "b:c" differ), and
the rules below keep two requests apart unless every engine answers them alike:

- every string is its exact UTF-8 bytes: no Unicode normalisation (NFC merges
  KELVIN SIGN with K, and byte-level tokenizers see them differently), no JSON
  re-serialisation (key order in a schema orders structured output); a string
  that is not valid Unicode (a lone surrogate) is refused, naming the field;
- an unset field has no record, so it differs from every value, the engine's
  default included (vLLM takes unset parameters from generation_config.json);
- floats are their exact IEEE-754 doubles, except that -0.0 is 0.0 (engines
  only compare, add and multiply them); NaN and infinities are refused;
- the only equivalences kept are orders that no engine reads: map entries
  (extra, logit_bias) and members of true sets (stop token ids, bad words,
  allowed token ids). Stop strings keep their order (the first match wins);
- fields that do not shape output (stream, request ids) never reach this module.

Text-like values (the input, schemas, tools, templates) are reduced to SHA-256
digests inside the material, so an entry carries its whole key material without
carrying prompt text, and the material stays small.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

from sidecar.errors import InvalidArgument
from sidecar.key_input import input_digest_of
from sidecar.key_records import (
    Encoder,
    Records,
    check_count,
    check_len,
    finite,
    json_text,
    small,
    utf8,
)
from sidecar.key_surface import (
    ChatMessage,
    ChatTemplateOptions,
    ContentPart,
    FormatType,
    GuidedDecoding,
    OutputOptions,
    PartKind,
    ResponseFormat,
    ToolCall,
)
from sidecar.key_types import (
    TOOL_EXTRA_KEYS,
    CacheKey,
    Input,
    InputKind,
    KeyDigest,
    KeyLimits,
    KeyRequest,
    Sampling,
)

__all__ = [
    "KEY_SCHEMA_VERSION",
    "TOOL_EXTRA_KEYS",
    "CacheKey",
    "ChatMessage",
    "ChatTemplateOptions",
    "ContentPart",
    "FormatType",
    "GuidedDecoding",
    "Input",
    "InputKind",
    "KeyDigest",
    "KeyLimits",
    "KeyRequest",
    "OutputOptions",
    "PartKind",
    "ResponseFormat",
    "Sampling",
    "ToolCall",
    "build_key",
    "dims_from_material",
]

KEY_SCHEMA_VERSION = 2
"""v2: exact strings, unset distinct from defaults, the OpenAI request surface (v1 entries miss)."""
_MAGIC = b"ICK"


_DEFAULT_LIMITS = KeyLimits()


def build_key(
    req: KeyRequest, limits: KeyLimits = _DEFAULT_LIMITS, default_model_version: str = ""
) -> CacheKey:
    """Validate and encode a request into a CacheKey.

    `default_model_version` stands in for an empty model_version (a pod that knows
    its own model's fingerprint). Raises InvalidArgument naming the field.
    """
    model = req.model_version or default_model_version
    enc = Encoder()
    enc.raw(_dimension("key.tenant", req.tenant, limits, required=True))
    enc.raw(_dimension("key.model_version", model, limits, required=True))
    enc.raw(_dimension("key.adapter_version", req.adapter_version, limits, required=False))
    enc.raw(_dimension("key.prompt_version", req.prompt_version, limits, required=True))
    input_kind, input_digest = input_digest_of(req, limits)
    enc.u32(int(input_kind))
    enc.raw(input_digest)
    rec = Records()
    temperature = _sampling_records(rec, req.sampling, limits)
    tools = _request_records(rec, req, limits)
    material = _MAGIC + bytes([KEY_SCHEMA_VERSION]) + enc.finish() + rec.finish()
    return CacheKey(
        digest=KeyDigest(hashlib.sha256(material).digest()),
        material=material,
        tenant=req.tenant,
        model_version=model,
        adapter_version=req.adapter_version,
        prompt_version=req.prompt_version,
        temperature=1.0 if temperature is None else temperature,
        seeded=req.sampling.seed is not None,
        tools=tools,
    )


def dims_from_material(material: bytes) -> tuple[str, str, str, str] | None:
    """(tenant, model_version, adapter_version, prompt_version) of a key's material.

    None when the material is not of this schema (it is then never matched).
    """
    if material[:4] != _MAGIC + bytes([KEY_SCHEMA_VERSION]):
        return None
    out: list[str] = []
    pos = 4
    for _ in range(4):
        if pos + 4 > len(material):
            return None
        (n,) = struct.unpack_from(">I", material, pos)
        pos += 4
        if pos + n > len(material):
            return None
        out.append(material[pos : pos + n].decode("utf-8", errors="replace"))
        pos += n
    return out[0], out[1], out[2], out[3]


def _dimension(field_name: str, value: str, limits: KeyLimits, *, required: bool) -> bytes:
    check_len(field_name, value, limits.max_dimension_chars)
    if required and not value.strip():
        raise InvalidArgument(field_name, "is required and must not be empty")
    return utf8(field_name, value)


_I32_MAX = 2**31 - 1
_I64 = (-(2**63), 2**63 - 1)


def _sampling_records(rec: Records, s: Sampling, lim: KeyLimits) -> float | None:
    """Records 1..49: the sampling fields that are set; returns the temperature sent."""
    p = "key.sampling."
    temperature = rec.number(1, p + "temperature", s.temperature, 0.0, 100.0)
    rec.number(2, p + "top_p", s.top_p, 0.0, 1.0, lo_open=True)
    rec.integer(3, p + "top_k", s.top_k, -1, _I32_MAX)
    rec.integer(4, p + "max_tokens", s.max_tokens, 0, _I32_MAX)
    check_count(p + "stop", len(s.stop), lim.max_stop_entries)
    rec.strings(5, p + "stop", s.stop, lim.max_stop_chars, as_set=False)
    rec.integer(6, p + "seed", s.seed, *_I64)
    rec.number(7, p + "presence_penalty", s.presence_penalty, -2.0, 2.0)
    rec.number(8, p + "frequency_penalty", s.frequency_penalty, -2.0, 2.0)
    rec.number(9, p + "repetition_penalty", s.repetition_penalty, 0.0, 100.0, lo_open=True)
    rec.number(10, p + "min_p", s.min_p, 0.0, 1.0)
    rec.integer(11, p + "min_tokens", s.min_tokens, 0, _I32_MAX)
    _token_set(rec, 12, p + "stop_token_ids", s.stop_token_ids, lim.max_stop_entries)
    rec.integer(13, p + "n", s.n, 1, 1024)
    rec.integer(14, p + "logprobs", s.logprobs, 0, 1024)
    rec.flag(15, s.ignore_eos)
    if s.response_format is not None:
        rec.digest(16, _format_bytes(s.response_format, lim))
    _logit_bias(rec, 17, s.logit_bias, lim)
    rec.integer(18, p + "top_logprobs", s.top_logprobs, 0, 1024)
    rec.flag(19, s.return_logprobs)
    rec.integer(20, p + "prompt_logprobs", s.prompt_logprobs, -1, 1024)
    rec.number(21, p + "length_penalty", s.length_penalty, -100.0, 100.0)
    check_count(p + "bad_words", len(s.bad_words), lim.max_stop_entries)
    rec.strings(22, p + "bad_words", s.bad_words, lim.max_stop_chars, as_set=True)
    _token_set(rec, 23, p + "allowed_token_ids", s.allowed_token_ids, lim.max_allowed_token_ids)
    rec.flag(24, s.include_stop_str_in_output)
    rec.flag(25, s.skip_special_tokens)
    rec.flag(26, s.spaces_between_special_tokens)
    rec.integer(27, p + "best_of", s.best_of, 1, 1024)
    rec.flag(28, s.use_beam_search)
    rec.integer(29, p + "truncate_prompt_tokens", s.truncate_prompt_tokens, -1, _I32_MAX)
    rec.integer(30, p + "max_completion_tokens", s.max_completion_tokens, 0, _I32_MAX)
    if s.guided is not None:
        _guided_records(rec, s.guided, lim)
    return temperature


def _token_set(rec: Records, tag: int, field_name: str, ids: Sequence[int], limit: int) -> None:
    if not ids:
        return
    check_count(field_name, len(ids), limit)
    for i in ids:
        if not -(2**31) <= i < 2**31:
            raise InvalidArgument(field_name, f"{i} is not a 32-bit token id")
    rec.digest(tag, b"".join(struct.pack(">q", i) for i in sorted(set(ids))))


def _format_bytes(fmt: ResponseFormat, limits: KeyLimits) -> bytes:
    p = "key.sampling.response_format."
    rec = Records()
    rec.put(1, struct.pack(">I", int(fmt.type)))
    is_json = fmt.type in (
        FormatType.JSON_SCHEMA,
        FormatType.JSON_OBJECT,
        FormatType.STRUCTURAL_TAG,
    )
    if is_json and fmt.schema.strip():
        rec.json_text(2, p + "schema", fmt.schema, limits.max_schema_chars)
    elif fmt.type is FormatType.JSON_SCHEMA:
        raise InvalidArgument(p + "schema", "is required for JSON_SCHEMA")
    else:
        rec.text(2, p + "schema", fmt.schema, limits.max_schema_chars)
    rec.text(3, p + "name", fmt.name, limits.max_dimension_chars)
    rec.flag(4, fmt.strict)
    rec.text(5, p + "description", fmt.description, limits.max_extra_value_chars)
    return rec.finish()


def _logit_bias(rec: Records, tag: int, bias: Mapping[int, float], lim: KeyLimits) -> None:
    if not bias:
        return
    field_name = "key.sampling.logit_bias"
    check_count(field_name, len(bias), lim.max_logit_bias_entries)
    parts = []
    for token in sorted(bias):
        if not _I64[0] <= token <= _I64[1]:
            # Encoded as a signed 64-bit id; a larger one is no token (and would not pack).
            raise InvalidArgument(field_name, f"token id {token} is out of range")
        value = finite(f"{field_name}[{token}]", bias[token], -100.0, 100.0)
        parts.append(struct.pack(">qd", token, value))
    rec.digest(tag, b"".join(parts))


def _guided_records(rec: Records, g: GuidedDecoding, lim: KeyLimits) -> None:
    """Records 31..41: vLLM guided decoding, flattened (an empty one is no constraint)."""
    p = "key.sampling.guided."
    rec.json_text(31, p + "json", g.json, lim.max_schema_chars)
    rec.text(32, p + "regex", g.regex, lim.max_schema_chars)
    check_count(p + "choice", len(g.choice), lim.max_choices)
    rec.strings(33, p + "choice", g.choice, lim.max_extra_value_chars, as_set=False)
    rec.text(34, p + "grammar", g.grammar, lim.max_schema_chars)
    rec.flag(35, g.json_object)
    rec.json_text(36, p + "structural_tag", g.structural_tag, lim.max_schema_chars)
    rec.text(37, p + "whitespace_pattern", g.whitespace_pattern, lim.max_dimension_chars)
    rec.text(38, p + "backend", g.backend, lim.max_dimension_chars)
    rec.flag(39, g.disable_any_whitespace)
    rec.flag(40, g.disable_additional_properties)
    rec.flag(41, g.disable_fallback)


def _request_records(rec: Records, req: KeyRequest, lim: KeyLimits) -> bool:
    """Records 100..: request-level fields; returns whether the request offers tools."""
    tools = _extra_records(rec, 100, req.extra, lim)
    if req.tools:
        check_count("key.tools", len(req.tools), lim.max_tools)
        enc = Encoder()
        for i, tool in enumerate(req.tools):
            enc.raw(json_text(f"key.tools[{i}]", tool, lim.max_tool_chars))
        rec.digest(101, enc.finish())
    rec.text(102, "key.tool_choice", req.tool_choice, lim.max_json_chars)
    rec.flag(103, req.parallel_tool_calls)
    if req.endpoint:
        rec.text(104, "key.endpoint", req.endpoint, lim.max_dimension_chars)
    if req.chat_template is not None:
        _template_records(rec, req.chat_template, lim)
    if req.output is not None:
        _output_records(rec, req.output, lim)
    return tools or bool(req.tools)


def _template_records(rec: Records, t: ChatTemplateOptions, lim: KeyLimits) -> None:
    p = "key.chat_template."
    rec.flag(110, t.add_generation_prompt)
    rec.flag(111, t.continue_final_message)
    rec.flag(112, t.add_special_tokens)
    rec.text(113, p + "chat_template", t.chat_template, lim.max_schema_chars)
    rec.json_text(114, p + "chat_template_kwargs", t.chat_template_kwargs, lim.max_json_chars)
    rec.json_text(115, p + "documents", t.documents, lim.max_schema_chars)
    rec.json_text(116, p + "mm_processor_kwargs", t.mm_processor_kwargs, lim.max_json_chars)


def _output_records(rec: Records, o: OutputOptions, lim: KeyLimits) -> None:
    p = "key.output."
    short = lim.max_dimension_chars
    rec.text(120, p + "reasoning_effort", o.reasoning_effort, short)
    rec.text(121, p + "verbosity", o.verbosity, short)
    check_count(p + "modalities", len(o.modalities), lim.max_stop_entries)
    rec.strings(122, p + "modalities", o.modalities, short, as_set=False)
    rec.json_text(123, p + "audio", o.audio, lim.max_json_chars)
    rec.json_text(124, p + "prediction", o.prediction, lim.max_schema_chars)
    rec.json_text(125, p + "web_search_options", o.web_search_options, lim.max_json_chars)
    rec.text(126, p + "suffix", o.suffix, lim.max_schema_chars)
    rec.flag(127, o.echo)
    rec.text(128, p + "encoding_format", o.encoding_format, short)
    rec.integer(129, p + "dimensions", o.dimensions, 1, _I32_MAX)
    rec.flag(130, o.return_tokens_as_token_ids)


def _extra_records(rec: Records, tag: int, extra: Mapping[str, str], lim: KeyLimits) -> bool:
    """Encode `extra` (a map: order never matters); returns whether it names tools."""
    check_count("key.extra", len(extra), lim.max_extra_entries)
    if not extra:
        return False
    items: list[tuple[bytes, bytes]] = []
    for k, v in extra.items():
        if not k:
            raise InvalidArgument("key.extra", "keys must not be empty")
        name = f"key.extra[{k[:32]!r}]"
        items.append(
            (
                small(name + " (key)", k, lim.max_extra_key_chars),
                small(name, v, lim.max_extra_value_chars),
            )
        )
    enc = Encoder()
    for kb, vb in sorted(items):
        enc.raw(kb)
        enc.raw(vb)
    rec.digest(tag, enc.finish())
    return any(k.lower() in TOOL_EXTRA_KEYS for k in extra)
