"""The key's value types: the request as a caller sent it (KeyRequest, Sampling), its
limits, and the canonical key built from it (CacheKey, KeyDigest). How they are
encoded is sidecar.keys; these are values only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NewType

from sidecar.key_surface import (
    ChatMessage,
    ChatTemplateOptions,
    GuidedDecoding,
    OutputOptions,
    ResponseFormat,
)

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
    max_tools: int = 128
    max_tool_chars: int = 64 * 1024
    max_json_chars: int = 64 * 1024
    """Each JSON option (tool_choice, chat_template_kwargs, audio, prediction, ...)."""
    max_parts: int = 256
    """Content parts per chat message."""
    max_tool_calls: int = 128
    """Tool calls per chat message."""
    max_choices: int = 256
    max_allowed_token_ids: int = 262_144


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling and decoding parameters as sent; None (or empty) means "not set"."""

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
    top_logprobs: int | None = None
    return_logprobs: bool | None = None
    prompt_logprobs: int | None = None
    length_penalty: float | None = None
    bad_words: Sequence[str] = ()
    allowed_token_ids: Sequence[int] = ()
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    best_of: int | None = None
    use_beam_search: bool | None = None
    truncate_prompt_tokens: int | None = None
    max_completion_tokens: int | None = None
    guided: GuidedDecoding | None = None


Input = str | tuple[ChatMessage, ...] | Sequence[int] | bytes
"""Text (str), chat (tuple of ChatMessage), token ids (int sequence) or a caller SHA-256."""


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """Everything a caller sent that may shape the output, as sent."""

    tenant: str
    model_version: str
    prompt_version: str
    input: Input | None
    input_kind: InputKind | None
    adapter_version: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    extra: Mapping[str, str] = field(default_factory=dict)
    tools: Sequence[str] = ()
    """Tool definitions, each the JSON object as sent, in request order."""
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    chat_template: ChatTemplateOptions | None = None
    endpoint: str = ""
    output: OutputOptions | None = None


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
    """The temperature sent; an unset one reads as 1.0 here (the policy's assumption only)."""
    seeded: bool = False
    """The request carries a sampling seed."""
    tools: bool = False
    """The request offers tools: `tools`, or an `extra` name in TOOL_EXTRA_KEYS."""

    @property
    def dims(self) -> tuple[str, str, str, str]:
        """(tenant, model_version, adapter_version, prompt_version): what invalidation matches."""
        return (self.tenant, self.model_version, self.adapter_version, self.prompt_version)
