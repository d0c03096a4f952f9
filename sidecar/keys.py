"""Cache keys: canonical, length-prefixed encoding of every output-shaping dimension.

A key's *material* is a self-describing byte string: a magic, the schema version
byte, then tagged, length-prefixed fields in a fixed order. The digest is the
full SHA-256 of the material. Length prefixes make the encoding injective
("a:b" + "c" and "a" + "b:c" encode differently), and the fixed order plus the
canonicalisation below make equivalent requests encode identically:

- floats are compared at float32 precision (what engines sample with), -0.0 is
  0.0 and NaN/inf are refused;
- unset sampling fields take their defaults before encoding;
- sets (stop strings, stop token ids) are sorted and de-duplicated, maps sorted;
- all text is Unicode NFC; a JSON response schema is re-serialised canonically;
- fields that do not shape output (stream, request ids) never reach this module.

The input itself is reduced to its SHA-256 inside the material, so a stored
entry can carry its whole key material without carrying prompt text.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
import unicodedata
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NewType, cast

from sidecar.errors import InvalidArgument

KEY_SCHEMA_VERSION = 1
_MAGIC = b"ICK"

KeyDigest = NewType("KeyDigest", bytes)
"""32-byte SHA-256 of a key's material."""

TOOL_EXTRA_KEYS = frozenset(
    {"tools", "functions", "tool_schema", "tool_schema_version", "tool_choice"}
)
"""`extra` names (compared case-insensitively) that say the request offers the model tools."""


class InputKind(IntEnum):
    """Each kind is its own key space: a caller-hashed input never equals a text input."""

    TEXT = 1
    CHAT = 2
    TOKENS = 3
    SHA256 = 4


class FormatType(IntEnum):
    """Structured-output modes (values match the proto enum)."""

    TEXT = 1
    JSON_OBJECT = 2
    JSON_SCHEMA = 3
    REGEX = 4
    GRAMMAR = 5


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Upper bounds on every part of a key; exceeding one is INVALID_ARGUMENT."""

    max_dimension_chars: int = 256
    max_input_bytes: int = 8 * 1024 * 1024
    max_chat_messages: int = 4096
    max_token_ids: int = 2_000_000
    max_stop_entries: int = 64
    max_stop_chars: int = 256
    max_extra_entries: int = 64
    max_extra_key_chars: int = 128
    max_extra_value_chars: int = 4096
    max_schema_chars: int = 256 * 1024
    max_logit_bias_entries: int = 1024


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn."""

    role: str
    content: str
    name: str = ""
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Structured-output constraint; `schema` is JSON, a regex or a grammar."""

    type: FormatType = FormatType.TEXT
    schema: str = ""


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling parameters as sent; None means "not set, use the default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    stop: Sequence[str] = ()
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    stop_token_ids: Sequence[int] = ()
    n: int | None = None
    logprobs: int | None = None
    ignore_eos: bool | None = None
    response_format: ResponseFormat | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)


Input = str | tuple[ChatMessage, ...] | Sequence[int] | bytes
"""Text (str), chat (tuple of ChatMessage), token ids (int sequence) or a caller SHA-256."""


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """Everything a caller sent that may shape the output, before canonicalisation."""

    tenant: str
    model_version: str
    prompt_version: str
    input: Input | None
    input_kind: InputKind | None
    adapter_version: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CacheKey:
    """A canonical key: its digest, its material, and the dimensions invalidation matches on."""

    digest: KeyDigest
    material: bytes
    tenant: str
    model_version: str
    adapter_version: str
    prompt_version: str
    # Facts the cacheability policy reads (sidecar.policy.cacheability.KeyFacts); not key dimensions
    # of their own: they are already encoded in the material.
    temperature: float = 1.0
    """Canonical temperature (unset = the default 1.0)."""
    seeded: bool = False
    """The request carries a sampling seed."""
    tools: bool = False
    """An `extra` entry names a tool / function schema (see TOOL_EXTRA_KEYS)."""

    @property
    def dims(self) -> tuple[str, str, str, str]:
        """(tenant, model_version, adapter_version, prompt_version): what invalidation matches."""
        return (self.tenant, self.model_version, self.adapter_version, self.prompt_version)


def build_key(
    req: KeyRequest, limits: KeyLimits = KeyLimits(), default_model_version: str = ""
) -> CacheKey:
    """Validate and canonicalise a request into a CacheKey.

    `default_model_version` stands in for an empty model_version (a pod that knows
    its own model's fingerprint). Raises InvalidArgument naming the field.
    """
    tenant = _dimension("key.tenant", req.tenant, limits, required=True)
    model = _dimension(
        "key.model_version", req.model_version or default_model_version, limits, required=True
    )
    adapter = _dimension("key.adapter_version", req.adapter_version, limits, required=False)
    prompt = _dimension("key.prompt_version", req.prompt_version, limits, required=True)
    input_kind, input_digest = _input_digest(req, limits)

    enc = _Encoder()
    enc.text(tenant)
    enc.text(model)
    enc.text(adapter)
    enc.text(prompt)
    temperature = _encode_sampling(enc, req.sampling, limits)
    tools = _encode_extra(enc, req.extra, limits)
    enc.u32(int(input_kind))
    enc.raw(input_digest)
    material = _MAGIC + bytes([KEY_SCHEMA_VERSION]) + enc.finish()
    return CacheKey(
        digest=KeyDigest(hashlib.sha256(material).digest()),
        material=material,
        tenant=tenant,
        model_version=model,
        adapter_version=adapter,
        prompt_version=prompt,
        temperature=temperature,
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


class _Encoder:
    """Length-prefixed field writer: every field is u32 length + bytes."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, data: bytes) -> None:
        self._parts.append(struct.pack(">I", len(data)))
        self._parts.append(data)

    def text(self, value: str) -> None:
        self.raw(value.encode("utf-8"))

    def u32(self, value: int) -> None:
        self.raw(struct.pack(">I", value))

    def i64(self, value: int) -> None:
        self.raw(struct.pack(">q", value))

    def f32(self, value: float) -> None:
        self.raw(struct.pack(">f", value))

    def absent(self) -> None:
        # An empty field is distinct from every present value (those are never empty).
        self.raw(b"")

    def finish(self) -> bytes:
        return b"".join(self._parts)


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


def _check_len(field_name: str, value: str, max_chars: int) -> None:
    if len(value) > max_chars:
        raise InvalidArgument(field_name, f"is {len(value)} characters; the limit is {max_chars}")


def _dimension(field_name: str, value: str, limits: KeyLimits, *, required: bool) -> str:
    _check_len(field_name, value, limits.max_dimension_chars)
    value = _nfc(value)
    if required and not value.strip():
        raise InvalidArgument(field_name, "is required and must not be empty")
    return value


def _input_digest(req: KeyRequest, limits: KeyLimits) -> tuple[InputKind, bytes]:
    kind, value = req.input_kind, req.input
    if kind is None or value is None:
        raise InvalidArgument("key.input", "is required: set text, chat, token_ids or input_sha256")
    h = hashlib.sha256()
    if kind is InputKind.TEXT:
        assert isinstance(value, str)
        data = _nfc(value).encode("utf-8")
        if len(data) > limits.max_input_bytes:
            raise InvalidArgument(
                "key.text", f"is {len(data)} bytes; the limit is {limits.max_input_bytes}"
            )
        h.update(data)
    elif kind is InputKind.CHAT:
        assert isinstance(value, tuple)
        _hash_chat(h, value, limits)
    elif kind is InputKind.TOKENS:
        # The API passes token ids as a tuple, like chat: the kind decides, not the type.
        assert not isinstance(value, str | bytes)
        value = cast("Sequence[int]", value)
        if len(value) > limits.max_token_ids:
            raise InvalidArgument(
                "key.token_ids", f"has {len(value)} ids; the limit is {limits.max_token_ids}"
            )
        try:
            ids = array("I", value)
        except OverflowError as exc:
            raise InvalidArgument("key.token_ids", "ids must be in [0, 2**32)") from exc
        if sys.byteorder == "little":
            ids.byteswap()  # hash big-endian so digests agree across platforms
        h.update(struct.pack(">I", len(ids)))
        h.update(ids.tobytes())
    else:
        assert isinstance(value, bytes)
        if len(value) != 32:
            raise InvalidArgument("key.input_sha256", f"must be 32 bytes, got {len(value)}")
        return kind, value
    return kind, h.digest()


def _hash_chat(h: hashlib._Hash, messages: tuple[ChatMessage, ...], limits: KeyLimits) -> None:
    if not messages:
        raise InvalidArgument("key.chat.messages", "must hold at least one message")
    if len(messages) > limits.max_chat_messages:
        raise InvalidArgument(
            "key.chat.messages",
            f"has {len(messages)} messages; the limit is {limits.max_chat_messages}",
        )
    enc = _Encoder()
    total = 0
    for i, msg in enumerate(messages):
        _check_len(f"key.chat.messages[{i}].role", msg.role, limits.max_dimension_chars)
        _check_len(f"key.chat.messages[{i}].name", msg.name, limits.max_dimension_chars)
        _check_len(
            f"key.chat.messages[{i}].tool_call_id", msg.tool_call_id, limits.max_dimension_chars
        )
        if not msg.role:
            raise InvalidArgument(f"key.chat.messages[{i}].role", "is required")
        content = _nfc(msg.content).encode("utf-8")
        total += len(content)
        if total > limits.max_input_bytes:
            raise InvalidArgument(
                "key.chat", f"content exceeds the input limit of {limits.max_input_bytes} bytes"
            )
        enc.text(_nfc(msg.role))
        enc.raw(content)
        enc.text(_nfc(msg.name))
        enc.text(_nfc(msg.tool_call_id))
    h.update(struct.pack(">I", len(messages)))
    h.update(enc.finish())


def _float(
    field_name: str,
    value: float | None,
    default: float,
    lo: float,
    hi: float,
    *,
    lo_open: bool = False,
) -> float:
    v = default if value is None else float(value)
    if math.isnan(v) or math.isinf(v):
        raise InvalidArgument(field_name, "must be a finite number")
    if v < lo or v > hi or (lo_open and v == lo):
        bound = "(" if lo_open else "["
        raise InvalidArgument(field_name, f"is {v}; must be in {bound}{lo}, {hi}]")
    # float32 is the precision engines sample with; it also folds 0.1+0.2 into 0.3.
    out: float = struct.unpack(">f", struct.pack(">f", v))[0]
    return out + 0.0  # -0.0 -> 0.0


def _int(field_name: str, value: int | None, default: int, lo: int, hi: int) -> int:
    v = default if value is None else int(value)
    if v < lo or v > hi:
        raise InvalidArgument(field_name, f"is {v}; must be in [{lo}, {hi}]")
    return v


_I32_MAX = 2**31 - 1


def _encode_sampling(enc: _Encoder, s: Sampling, limits: KeyLimits) -> float:
    """Encode the sampling parameters; returns the canonical temperature."""
    p = "key.sampling."
    temperature = _float(p + "temperature", s.temperature, 1.0, 0.0, 100.0)
    enc.f32(temperature)
    enc.f32(_float(p + "top_p", s.top_p, 1.0, 0.0, 1.0, lo_open=True))
    top_k = _int(p + "top_k", s.top_k, 0, -1, _I32_MAX)
    enc.i64(0 if top_k == -1 else top_k)  # -1 and 0 both mean "disabled"
    enc.i64(_int(p + "max_tokens", s.max_tokens, 0, 0, _I32_MAX))
    enc.raw(_string_set(p + "stop", s.stop, limits))
    if s.seed is None:
        enc.absent()
    else:
        enc.i64(_int(p + "seed", s.seed, 0, -(2**63), 2**63 - 1))
    enc.f32(_float(p + "presence_penalty", s.presence_penalty, 0.0, -2.0, 2.0))
    enc.f32(_float(p + "frequency_penalty", s.frequency_penalty, 0.0, -2.0, 2.0))
    enc.f32(_float(p + "repetition_penalty", s.repetition_penalty, 1.0, 0.0, 100.0, lo_open=True))
    enc.f32(_float(p + "min_p", s.min_p, 0.0, 0.0, 1.0))
    enc.i64(_int(p + "min_tokens", s.min_tokens, 0, 0, _I32_MAX))
    if len(s.stop_token_ids) > limits.max_stop_entries:
        raise InvalidArgument(
            p + "stop_token_ids",
            f"has {len(s.stop_token_ids)} entries; the limit is {limits.max_stop_entries}",
        )
    stop_ids = sorted(set(s.stop_token_ids))
    enc.raw(b"".join(struct.pack(">q", i) for i in stop_ids))
    enc.i64(_int(p + "n", s.n, 1, 1, 1024))
    if s.logprobs is None:
        enc.absent()
    else:
        enc.i64(_int(p + "logprobs", s.logprobs, 0, 0, 1024))
    enc.u32(1 if s.ignore_eos else 0)
    _encode_format(enc, s.response_format, limits)
    _encode_logit_bias(enc, s.logit_bias, limits)
    return temperature


def _string_set(field_name: str, values: Sequence[str], limits: KeyLimits) -> bytes:
    if len(values) > limits.max_stop_entries:
        raise InvalidArgument(
            field_name, f"has {len(values)} entries; the limit is {limits.max_stop_entries}"
        )
    for i, v in enumerate(values):
        _check_len(f"{field_name}[{i}]", v, limits.max_stop_chars)
    enc = _Encoder()
    for v in sorted({_nfc(v) for v in values}):
        enc.text(v)
    return enc.finish()


def _encode_format(enc: _Encoder, fmt: ResponseFormat | None, limits: KeyLimits) -> None:
    fmt = fmt or ResponseFormat()
    field_name = "key.sampling.response_format.schema"
    _check_len(field_name, fmt.schema, limits.max_schema_chars)
    schema = _nfc(fmt.schema)
    if fmt.type in (FormatType.JSON_SCHEMA, FormatType.JSON_OBJECT) and schema.strip():
        try:
            parsed = json.loads(schema)
        except ValueError as exc:
            raise InvalidArgument(field_name, f"is not valid JSON: {exc}") from exc
        except RecursionError as exc:  # "[[[[...": fits the length limit, not the parser
            raise InvalidArgument(field_name, "nests too deeply") from exc
        # Key order and whitespace do not change what a schema accepts.
        schema = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    elif fmt.type is FormatType.JSON_SCHEMA:
        raise InvalidArgument(field_name, "is required for JSON_SCHEMA")
    enc.u32(int(fmt.type))
    enc.text(schema if fmt.type is not FormatType.TEXT else "")


def _encode_logit_bias(enc: _Encoder, bias: Mapping[int, float], limits: KeyLimits) -> None:
    field_name = "key.sampling.logit_bias"
    if len(bias) > limits.max_logit_bias_entries:
        raise InvalidArgument(
            field_name, f"has {len(bias)} entries; the limit is {limits.max_logit_bias_entries}"
        )
    inner = _Encoder()
    for token in sorted(bias):
        inner.i64(token)
        inner.f32(_float(f"{field_name}[{token}]", bias[token], 0.0, -100.0, 100.0))
    enc.raw(inner.finish())


def _encode_extra(enc: _Encoder, extra: Mapping[str, str], limits: KeyLimits) -> bool:
    """Encode `extra`; returns whether one of its names is in TOOL_EXTRA_KEYS."""
    if len(extra) > limits.max_extra_entries:
        raise InvalidArgument(
            "key.extra", f"has {len(extra)} entries; the limit is {limits.max_extra_entries}"
        )
    normalised: dict[str, str] = {}
    for k, v in extra.items():
        if not k:
            raise InvalidArgument("key.extra", "keys must not be empty")
        _check_len(f"key.extra[{k[:32]!r}] (key)", k, limits.max_extra_key_chars)
        _check_len(f"key.extra[{k[:32]!r}]", v, limits.max_extra_value_chars)
        nk = _nfc(k)
        if nk in normalised:
            raise InvalidArgument(f"key.extra[{k[:32]!r}]", "duplicates another key after NFC")
        normalised[nk] = _nfc(v)
    inner = _Encoder()
    for k in sorted(normalised):
        inner.text(k)
        inner.text(normalised[k])
    enc.raw(inner.finish())
    return any(k.lower() in TOOL_EXTRA_KEYS for k in normalised)
