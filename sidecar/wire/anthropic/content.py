"""Messages API `messages` and `system` as key values (docs/keys.md, /v1/messages).

vLLM 0.32 reads a request through pydantic models (vllm/entrypoints/anthropic/
protocol.py) that ignore fields they do not declare, `cache_control` among them, on the
body, on each system and message block and on each tool. So `cache_control` at those
places is dropped here before keying: the same request with and without a caching hint
is the same prompt to the model server. Inside a `tool_result`'s content it is kept:
vLLM renders an assistant turn's tool_result content with `str()`, hints included.

Per message: `role`; a string `content` is the message's content; a block array is
parts (text, base64 images by the digest of their bytes), tool calls (`tool_use`), and
leftovers keyed whole (`tool_result`, `thinking`, unknown block types, extra keys on a
block, the order of block kinds). The leftovers are one `extra` entry,
`extra["messages"]`, the digest of the (where, value) list, as for chat.

An image the model server would fetch (a `url` source, or a `file` by id), anywhere in
the request, makes it uncacheable (`Uncacheable`): its content can change under the
same text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import MutableMapping
from typing import Any

from sidecar.keys import ChatMessage, ContentPart, PartKind, ToolCall
from sidecar.wire.errors import bad_request
from sidecar.wire.leftovers import Leftovers, Where, key_leftovers
from sidecar.wire.openai.chat import Uncacheable
from sidecar.wire.values import dumps, extra_value

HINT = "cache_control"
"""The prompt-caching hint vLLM ignores (see the module docstring)."""
LEFTOVERS_EXTRA = "messages"
"""The `extra` entry holding the digest of the messages' leftovers (as for chat)."""


_TEXT_KEYS = frozenset({"type", "text", HINT})
_IMAGE_KEYS = frozenset({"type", "source", HINT})
_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input", HINT})


def without_hint(block: dict[str, Any]) -> dict[str, Any]:
    """A block (or tool) without its top-level `cache_control`, key order kept."""
    if HINT not in block:
        return block
    return {k: x for k, x in block.items() if k != HINT}


def system_value(raw: Any) -> str:
    """The `system` field as keyed: a string as sent, text blocks without their hints
    (a leading marker keeps the two forms apart)."""
    if isinstance(raw, str):
        return "string:" + raw
    if not isinstance(raw, list) or not all(isinstance(b, dict) for b in raw):
        raise bad_request("system", "must be a string or an array of content blocks")
    for i, block in enumerate(raw):
        _check_type(block, f"system[{i}]")
        _no_remote(block, f"system[{i}]")
    return "blocks:" + dumps([without_hint(b) for b in raw])


def messages(raw: Any, extra: MutableMapping[str, str]) -> tuple[ChatMessage, ...]:
    """The `messages` array as ChatMessages; the leftovers' digest goes into `extra`."""
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages", "must be a non-empty array of messages")
    left: Leftovers = {}
    out = tuple(_message(m, i, left) for i, m in enumerate(raw))
    key_leftovers(left, extra, LEFTOVERS_EXTRA)
    return out


def _message(m: Any, i: int, left: Leftovers) -> ChatMessage:
    p = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(p, "must be an object")
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise bad_request(p + ".role", "is required and must be a string")
    for name, value in m.items():
        if name not in ("role", "content"):
            left[(i, "field", name)] = extra_value(value)
    content = m.get("content")
    if isinstance(content, str):
        return ChatMessage(role=role, content=content)
    if not isinstance(content, list):
        raise bad_request(p + ".content", "must be a string or an array of content blocks")
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    kinds: list[str] = []
    for j, block in enumerate(content):
        q = f"{p}.content[{j}]"
        kind = _check_type(block, q)
        kinds.append(kind)
        where: Where = (i, "block", j)
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(ContentPart(PartKind.TEXT, text=block["text"]))
            _rest(block, _TEXT_KEYS, where, left)
        elif kind == "image":
            parts.append(_image(block, q, where, left))
            _rest(block, _IMAGE_KEYS, where, left)
        elif kind == "tool_use" and _is_call(block):
            calls.append(_call(block))
            _rest(block, _TOOL_USE_KEYS, where, left)
        else:
            # tool_result, thinking, redacted_thinking, tool_reference, an unknown type,
            # or a known one with fields of other types: keyed whole, as sent.
            _no_remote(block, q)
            left[where] = extra_value(without_hint(block))
    # Parts and calls are kept in two lists: the order of the kinds is keyed here.
    left[(i, "kinds")] = ",".join(kinds)
    return ChatMessage(role=role, content=None, parts=tuple(parts), tool_calls=tuple(calls))


def _check_type(block: Any, p: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad_request(p, "must be an object with a string `type`")
    return str(block["type"])


def _rest(block: dict[str, Any], known: frozenset[str], where: Where, left: Leftovers) -> None:
    """Keys of a block beyond the ones its key fields hold (citations, ...): keyed."""
    rest = {k: x for k, x in block.items() if k not in known}
    if rest:
        left[(*where, "rest")] = extra_value(rest)


def _is_call(block: dict[str, Any]) -> bool:
    return (
        isinstance(block.get("id"), str)
        and isinstance(block.get("name"), str)
        and isinstance(block.get("input"), dict)
    )


def _call(block: dict[str, Any]) -> ToolCall:
    # `input` is an object: its JSON text as parsed (vLLM renders json.dumps of it).
    return ToolCall(id=block["id"], name=block["name"], arguments=dumps(block["input"]))


def _image(block: dict[str, Any], p: str, where: Where, left: Leftovers) -> ContentPart:
    source = block.get("source")
    if not isinstance(source, dict):
        raise bad_request(p + ".source", "is required and must be an object")
    kind = source.get("type")
    if kind is not None and kind != "base64":
        raise Uncacheable(f"{p}.source ({kind}) is fetched by the model server")
    data = source.get("data")
    if not isinstance(data, str):
        raise bad_request(p + ".source.data", "is required and must be a base64 string")
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad_request(p + ".source.data", f"is not valid base64 ({exc})") from exc
    # The media type (and an absent `type`, which vLLM reads as base64) are keyed as sent.
    head = {k: x for k, x in source.items() if k != "data"}
    left[(*where, "source")] = extra_value(head)
    return ContentPart(PartKind.IMAGE, sha256=hashlib.sha256(decoded).digest())


def _no_remote(value: Any, p: str) -> None:
    """Uncacheable when `value` holds an image (or document) source the model server
    would fetch: a `source` object whose type is not base64 or text."""
    if isinstance(value, dict):
        source = value.get("source")
        if isinstance(source, dict) and source.get("type") not in (None, "base64", "text"):
            raise Uncacheable(f"{p} names media by {source.get('type')}; its content can change")
        for x in value.values():
            if isinstance(x, dict | list):
                _no_remote(x, p)
    elif isinstance(value, list):
        for x in value:
            _no_remote(x, p)
