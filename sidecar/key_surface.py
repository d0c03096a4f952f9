"""The OpenAI / vLLM request surface a key holds: chat turns, content parts, tool calls,
structured-output constraints, chat-template and output options (values only).

sidecar.keys encodes them; docs/keys.md maps each request field to one of these.
None (or an empty sequence) means "not sent", which is never the same as a default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class FormatType(IntEnum):
    """Structured-output modes (values match the proto enum; UNSPECIFIED is a value too)."""

    UNSPECIFIED = 0
    TEXT = 1
    JSON_OBJECT = 2
    JSON_SCHEMA = 3
    REGEX = 4
    GRAMMAR = 5
    STRUCTURAL_TAG = 6


class PartKind(IntEnum):
    """Kinds of content part (values match the proto oneof field numbers)."""

    TEXT = 1
    IMAGE = 2
    AUDIO = 3
    FILE = 4
    VIDEO = 5


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a message's content: text, or media named by the digest of its bytes."""

    kind: PartKind
    text: str = ""
    """TEXT only."""
    sha256: bytes = b""
    """Media only: SHA-256 of the bytes the model receives (never of a URL)."""
    detail: str | None = None
    format: str | None = None
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call an assistant message made; `arguments` is the JSON text as sent."""

    id: str
    name: str
    arguments: str
    type: str = "function"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn; content is a string, null (None), or `parts` (then `content` is None)."""

    role: str
    content: str | None = ""
    """None: the content is null or absent (distinct from "")."""
    name: str = ""
    """Empty: no name."""
    tool_call_id: str = ""
    parts: Sequence[ContentPart] = ()
    tool_calls: Sequence[ToolCall] = ()
    reasoning_content: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """OpenAI `response_format`; `schema` is JSON (hashed as sent), a regex or a grammar."""

    type: FormatType = FormatType.TEXT
    schema: str = ""
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class GuidedDecoding:
    """vLLM `structured_outputs` / `guided_*`; every text as sent."""

    json: str | None = None
    regex: str | None = None
    choice: Sequence[str] = ()
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None
    whitespace_pattern: str | None = None
    backend: str | None = None
    disable_any_whitespace: bool | None = None
    disable_additional_properties: bool | None = None
    disable_fallback: bool | None = None


@dataclass(frozen=True, slots=True)
class ChatTemplateOptions:
    """Request fields that change how a chat template renders the messages (JSON as sent)."""

    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    add_special_tokens: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: str | None = None
    documents: str | None = None
    mm_processor_kwargs: str | None = None


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Output-shaping request fields outside sampling (JSON objects as sent)."""

    reasoning_effort: str | None = None
    verbosity: str | None = None
    modalities: Sequence[str] = ()
    audio: str | None = None
    prediction: str | None = None
    web_search_options: str | None = None
    suffix: str | None = None
    echo: bool | None = None
    encoding_format: str | None = None
    dimensions: int | None = None
    return_tokens_as_token_ids: bool | None = None
