"""The Responses API's `input` items as key values (docs/keys.md, responses): each item
is one ChatMessage, and whatever an item carries without a key field of its own is a
leftover, keyed as sent.

    message               role, content (a string, or parts)           -> ChatMessage
    function_call         call_id, name, arguments                     -> one ToolCall
    function_call_output  call_id, output (a string, or parts)         -> tool_call_id + content
    anything else         (reasoning, custom tool calls, ...)          -> the item whole

A non-message item's type is always a leftover (`(i, "item")`), which no message item
has, so an item can never key like a message with the same role and content. The
leftovers are one `extra` entry, `extra["input"]`, the digest of the (where, value)
list, as for chat (wire/openai/chat.py): no body field can be named `input` in `extra`
(it is the input). Parts are keyed as chat's are: text as text, inline media by the
digest of its bytes. What the model server would fetch or look up (an image or file
URL, a `file_id`, an `item_reference` to a stored item) makes the request
`Uncacheable`: its content is not in the request.
"""

from __future__ import annotations

import hashlib
from collections.abc import MutableMapping
from typing import Any

from sidecar.keys import ChatMessage, ContentPart, PartKind, ToolCall
from sidecar.wire.errors import bad_request
from sidecar.wire.leftovers import Leftovers, Where, key_leftovers
from sidecar.wire.openai.chat import Uncacheable, base64_bytes, data_url_bytes
from sidecar.wire.values import extra_value

LEFTOVERS_EXTRA = "input"
"""The `extra` entry holding the digest of the input items' leftovers."""


_TEXT_PARTS = frozenset({"input_text", "output_text"})
_KNOWN_ITEM_FIELDS = {
    "function_call": frozenset({"type", "call_id", "name", "arguments"}),
    "function_call_output": frozenset({"type", "call_id", "output"}),
}
"""The fields of an item type that have key fields of their own (the rest: leftovers)."""
_MESSAGE_FIELDS = frozenset({"role", "content"})
_STATEFUL_ITEMS = frozenset({"item_reference"})
"""Item types that name what the model server stored instead of carrying it."""


def input_messages(raw: list[Any], extra: MutableMapping[str, str]) -> tuple[ChatMessage, ...]:
    """The `input` array as ChatMessages; the leftovers' digest goes into `extra`."""
    if not raw:
        raise Uncacheable("`input` is an empty array")
    left: Leftovers = {}
    messages = tuple(_item(item, i, left) for i, item in enumerate(raw))
    key_leftovers(left, extra, LEFTOVERS_EXTRA)
    return messages


def _item(item: Any, i: int, left: Leftovers) -> ChatMessage:
    p = f"input[{i}]"
    if not isinstance(item, dict):
        raise bad_request(p, "must be an object")
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        raise bad_request(p + ".type", "must be a string")
    if kind is None or kind == "message":
        return _message(item, p, i, left)
    if kind in _STATEFUL_ITEMS:
        raise Uncacheable(f"{p} ({kind}) names an item stored on the model server")
    left[(i, "item")] = kind
    known = _KNOWN_ITEM_FIELDS.get(kind, frozenset())
    for name, value in item.items():
        if name not in known:
            left[(i, "field", name)] = extra_value(value)  # id, status, namespace, ...
    if kind == "function_call":
        call_id, name, arguments = (item.get(n) for n in ("call_id", "name", "arguments"))
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
            raise bad_request(p, "call_id, name and arguments must be strings")
        call = ToolCall(id=call_id, name=name, arguments=arguments, type=kind)
        return ChatMessage(role=kind, content=None, tool_calls=(call,))
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str):
            raise bad_request(p + ".call_id", "is required and must be a string")
        text, parts = _content(output, p + ".output", (i, "output"), left)
        return ChatMessage(role=kind, content=text, tool_call_id=call_id, parts=parts)
    # reasoning, custom tool calls and their outputs, ...: keyed whole (the leftovers
    # above), unless they name something to fetch.
    if _names_remote(item):
        raise Uncacheable(f"{p} ({kind}) names something by URL or file id")
    return ChatMessage(role=kind, content=None)


def _message(m: dict[str, Any], p: str, i: int, left: Leftovers) -> ChatMessage:
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise bad_request(p + ".role", "is required and must be a string")
    for name, value in m.items():
        if name not in _MESSAGE_FIELDS:
            # type ("message" sent, not absent), id, status, phase: keyed as sent.
            left[(i, "field", name)] = extra_value(value)
    if "content" not in m:
        left[(i, "no_content")] = "absent"  # keyed apart from `content: null`
    text, parts = _content(m.get("content"), p + ".content", (i, "content"), left)
    return ChatMessage(role=role, content=text, parts=parts)


def _content(
    content: Any, p: str, where: Where, left: Leftovers
) -> tuple[str | None, tuple[ContentPart, ...]]:
    if isinstance(content, str):
        return content, ()
    if content is None:
        left[(*where, "null")] = "null"
        return None, ()
    if not isinstance(content, list):
        raise bad_request(p, "must be a string or an array of parts")
    parts = tuple(
        part
        for j, raw in enumerate(content)
        if (part := _part(raw, f"{p}[{j}]", (*where, j), left)) is not None
    )
    if not parts:
        # Every part a leftover (refusals), or none: keep "parts, not text".
        left[(*where, "parts")] = extra_value(content)
    return None, parts


def _part(raw: Any, p: str, where: Where, left: Leftovers) -> ContentPart | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise bad_request(p, "must be an object with a string `type`")
    kind = raw["type"]
    if kind in _TEXT_PARTS:
        text = raw.get("text")
        if not isinstance(text, str):
            raise bad_request(p + ".text", "is required and must be a string")
        rest = {k: x for k, x in raw.items() if k != "text"}
        if rest != {"type": "input_text"}:
            left[where] = extra_value(rest)  # output_text, annotations, logprobs, ...
        return ContentPart(PartKind.TEXT, text=text)
    if kind == "input_image":
        return _image(raw, p, where, left)
    if kind == "input_file":
        return _file(raw, p, where, left)
    if kind == "input_audio":
        body = raw.get("input_audio")
        if not isinstance(body, dict):
            raise bad_request(p + ".input_audio", "is required and must be an object")
        _rest(raw, {"type", "input_audio"}, where, left)
        _rest(body, {"data", "format"}, (*where, "audio"), left)
        data = base64_bytes(body.get("data"), p + ".input_audio.data")
        return ContentPart(PartKind.AUDIO, sha256=_sha(data), format=_opt(body, "format", p))
    if _names_remote(raw):
        raise Uncacheable(f"{p} ({kind}) names media by URL or file id")
    left[where] = extra_value(raw)  # refusal, and part types this gateway does not know
    return None


def _image(raw: dict[str, Any], p: str, where: Where, left: Leftovers) -> ContentPart:
    if raw.get("file_id") is not None:
        raise Uncacheable(f"{p} names an image by file_id; its bytes are not in the request")
    url = raw.get("image_url")
    if not isinstance(url, str):
        raise bad_request(p + ".image_url", "is required and must be a string")
    if not url.startswith("data:"):
        raise Uncacheable(f"{p}.image_url is fetched by the model server; its content can change")
    _rest(raw, {"type", "image_url", "detail"}, where, left)
    data = data_url_bytes(url, p + ".image_url", where, left)
    return ContentPart(PartKind.IMAGE, sha256=_sha(data), detail=_opt(raw, "detail", p))


def _file(raw: dict[str, Any], p: str, where: Where, left: Leftovers) -> ContentPart:
    if raw.get("file_id") is not None or raw.get("file_url") is not None:
        raise Uncacheable(f"{p} names a file by id or URL; its bytes are not in the request")
    data = raw.get("file_data")
    if isinstance(data, str) and data.startswith("data:"):
        got = data_url_bytes(data, p + ".file_data", where, left)
    else:
        got = base64_bytes(data, p + ".file_data")
    _rest(raw, {"type", "file_data", "filename"}, where, left)
    return ContentPart(PartKind.FILE, sha256=_sha(got), filename=_opt(raw, "filename", p))


def _rest(body: dict[str, Any], known: set[str], where: Where, left: Leftovers) -> None:
    for name in sorted(set(body) - known):
        left[(*where, "body", name)] = extra_value(body[name])


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _opt(body: dict[str, Any], name: str, p: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"{p}.{name}", "must be a string")
    return value


_FETCHED = ("image_url", "file_url", "file_id", "url", "audio_url", "video_url")


def _names_remote(value: Any) -> bool:
    """Whether `value` names something by URL or id under a field the model server would
    resolve: a non-data URL, or any `file_id` (looked up in its file store)."""
    if isinstance(value, dict):
        for name, x in value.items():
            if name == "file_id" and x is not None:
                return True
            if name in _FETCHED and isinstance(x, str) and not x.startswith("data:"):
                return True
            if isinstance(x, dict | list) and _names_remote(x):
                return True
        return False
    if isinstance(value, list):
        return any(_names_remote(x) for x in value)
    return False
