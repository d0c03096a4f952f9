"""Chat `messages` as key values (docs/keys.md, chat completions): every message field
either has its key field or is a leftover, keyed as sent.

Leftovers (message fields without a key field of their own, parts of a type the gateway
does not know, extra keys on a part, a present-but-empty `name`, a data URL's head) are
one `extra` entry, `extra["messages"]`: a digest of the list of (where, value) pairs,
each `where` a tuple such as (0, "field", "refusal") or (2, "part", 1). Why one entry
and tuples: as separate entries named by their JSON path they shared a namespace with
the body's own unknown fields (a top-level field named "messages[0].name" keyed the
same as a message with an empty name) and with each other (a message field named
"content[1]" against the content's part 1), and a long conversation with one leftover
per turn (the SDKs echo `refusal: null`) ran past the limit on `extra` entries. No
top-level field can be named "messages" in `extra`: it is the chat's input.

Media parts are keyed by the digest of the bytes the model receives: inline data
(a `data:` URL, base64 audio or file data) is decoded and hashed here. Media the
gateway would have to fetch (an http URL, a `file_id`) cannot be hashed without
fetching it, so such a request is not cached at all (`Uncacheable`): a URL's
content can change under the same text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import MutableMapping
from typing import Any

from sidecar.keys import ChatMessage, ContentPart, PartKind, ToolCall
from sidecar.wire.errors import bad_request
from sidecar.wire.leftovers import Leftovers, Where, key_leftovers
from sidecar.wire.values import extra_value

_MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content", "reasoning"}
)
_MEDIA = {
    "image_url": PartKind.IMAGE,
    "input_audio": PartKind.AUDIO,
    "file": PartKind.FILE,
    "video_url": PartKind.VIDEO,
}


LEFTOVERS_EXTRA = "messages"
"""The `extra` entry holding the digest of a chat's leftovers."""


class Uncacheable(Exception):
    """The request is valid but cannot be keyed safely; it is forwarded uncached."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def chat_messages(raw: Any, extra: MutableMapping[str, str]) -> tuple[ChatMessage, ...]:
    """The `messages` array as ChatMessages; the leftovers' digest goes into `extra`."""
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages", "must be a non-empty array of messages")
    left: Leftovers = {}
    messages = tuple(_message(m, i, left) for i, m in enumerate(raw))
    key_leftovers(left, extra, LEFTOVERS_EXTRA)
    return messages


def _message(m: Any, i: int, left: Leftovers) -> ChatMessage:
    p = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(p, "must be an object")
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise bad_request(p + ".role", "is required and must be a string")
    for name, value in m.items():
        if name not in _MESSAGE_FIELDS:
            left[(i, "field", name)] = extra_value(value)
    content = m.get("content")
    text: str | None = None
    parts: tuple[ContentPart, ...] = ()
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = tuple(
            part
            for j, raw_part in enumerate(content)
            if (part := _part(raw_part, f"{p}.content[{j}]", (i, "part", j), left)) is not None
        )
        if not parts:
            # Every part is a leftover (e.g. only refusals): keep "parts, not text".
            left[(i, "content")] = extra_value(content)
    elif content is not None:
        raise bad_request(p + ".content", "must be a string, an array of parts, or null")
    name = _optional_str(m, "name", p, (i, "empty", "name"), left)
    call_id = _optional_str(m, "tool_call_id", p, (i, "empty", "tool_call_id"), left)
    if "tool_call_id" in m and m["tool_call_id"] is None:
        # vLLM hands the template the field whenever it is present: null is not absent.
        left[(i, "null", "tool_call_id")] = "null"
    reasoning = m.get("reasoning_content")
    if "reasoning" in m:
        if reasoning is None:
            reasoning = m["reasoning"]
        else:
            left[(i, "reasoning")] = extra_value(m["reasoning"])
    if m.get("tool_calls") == []:
        # Templates test whether tool_calls is defined: [] is not the same as absent.
        left[(i, "empty", "tool_calls")] = "[]"
    if reasoning is not None and not isinstance(reasoning, str):
        raise bad_request(p + ".reasoning_content", "must be a string")
    return ChatMessage(
        role=role,
        content=text,
        name=name,
        tool_call_id=call_id,
        parts=parts,
        tool_calls=_tool_calls(m.get("tool_calls"), p + ".tool_calls", i, left),
        reasoning_content=reasoning,
    )


def _optional_str(m: dict[str, Any], field: str, p: str, where: Where, left: Leftovers) -> str:
    v = m.get(field)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise bad_request(f"{p}.{field}", "must be a string")
    if v == "":
        # The key reads an empty name as none; the forwarded "" is kept apart here.
        left[where] = '""'
    return v


def _tool_calls(raw: Any, p: str, i: int, left: Leftovers) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad_request(p, "must be an array")
    calls = []
    for j, c in enumerate(raw):
        q = f"{p}[{j}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            raise bad_request(q + ".function", "is required and must be an object")
        if set(c) - {"id", "type", "function"} or set(fn) - {"name", "arguments"}:
            raise bad_request(q, "has fields other than id, type and function{name, arguments}")
        call_id, kind = c.get("id"), c.get("type", "function")
        if "type" not in c:
            # Keyed as "function" below; the call the model server got had no type.
            left[(i, "tool_call", j, "no_type")] = "absent"
        name, arguments = fn.get("name"), fn.get("arguments")
        if not (
            isinstance(call_id, str)
            and isinstance(kind, str)
            and isinstance(name, str)
            and isinstance(arguments, str)
        ):
            raise bad_request(q, "id, type, function.name and function.arguments must be strings")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments, type=kind))
    return tuple(calls)


def _part(raw: Any, p: str, where: Where, left: Leftovers) -> ContentPart | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise bad_request(p, "must be an object with a string `type`")
    kind = raw["type"]
    if kind == "text":
        text = raw.get("text")
        if not isinstance(text, str):
            raise bad_request(p + ".text", "is required and must be a string")
        if set(raw) - {"type", "text"}:
            left[where] = extra_value(raw)
        return ContentPart(PartKind.TEXT, text=text)
    media = _MEDIA.get(kind)
    if media is None:
        if _names_remote(raw):
            # audio_url, input_image and the like: the model server fetches what it names.
            raise Uncacheable(f"{p} ({kind}) names media by URL; its content can change")
        # refusal parts and part types this gateway does not know: keyed whole.
        left[where] = extra_value(raw)
        return None
    body = raw.get(kind)
    if not isinstance(body, dict):
        raise bad_request(f"{p}.{kind}", "is required and must be an object")
    if set(raw) - {"type", kind}:
        rest = {k: v for k, v in raw.items() if k not in ("type", kind)}
        left[(*where, "rest")] = extra_value(rest)
    return _media_part(media, body, f"{p}.{kind}", where, left)


_REMOTE = re.compile(r"\s*(?:[A-Za-z][A-Za-z0-9+.-]*://|file:)")
"""What a fetchable reference starts with: a scheme and `//` (http, https, s3, ...) or
`file:`. A `data:` URL carries its bytes and is not one."""


def _names_remote(value: Any) -> bool:
    """Whether a string anywhere in `value` is a URL the model server would fetch."""
    if isinstance(value, str):
        return _REMOTE.match(value) is not None
    if isinstance(value, dict):
        return any(_names_remote(x) for x in value.values())
    if isinstance(value, list):
        return any(_names_remote(x) for x in value)
    return False


def _media_part(
    kind: PartKind, body: dict[str, Any], p: str, where: Where, left: Leftovers
) -> ContentPart:
    if kind is PartKind.AUDIO:
        data, known = base64_bytes(body.get("data"), p + ".data"), {"data", "format"}
    elif kind is PartKind.FILE:
        if "file_data" not in body:
            raise Uncacheable(f"{p} names a file by id; its bytes are not in the request")
        data, known = _data_url_or_base64(body.get("file_data"), p + ".file_data", where, left)
    else:
        url = body.get("url")
        if not isinstance(url, str):
            raise bad_request(p + ".url", "is required and must be a string")
        if not url.startswith("data:"):
            raise Uncacheable(f"{p}.url is fetched by the model server; its content can change")
        data, known = data_url_bytes(url, p + ".url", where, left), {"url", "detail"}
    for name in sorted(set(body) - known):
        left[(*where, "body", name)] = extra_value(body[name])
    return ContentPart(
        kind,
        sha256=hashlib.sha256(data).digest(),
        detail=_opt(body, "detail", p) if kind is PartKind.IMAGE else None,
        format=_opt(body, "format", p) if kind is PartKind.AUDIO else None,
        filename=_opt(body, "filename", p) if kind is PartKind.FILE else None,
    )


def _data_url_or_base64(v: Any, p: str, where: Where, left: Leftovers) -> tuple[bytes, set[str]]:
    known = {"file_data", "filename"}
    if isinstance(v, str) and v.startswith("data:"):
        return data_url_bytes(v, p, where, left), known
    return base64_bytes(v, p), known


def data_url_bytes(url: str, p: str, where: Where, left: Leftovers) -> bytes:
    """The bytes a data URL carries; its head (media type, parameters, `;base64`) is
    keyed as sent: the model server reads it (a video/jpeg is a list of frames, a
    non-base64 URL is refused), so equal bytes under two heads are two requests."""
    head, sep, payload = url.partition(",")
    if not sep:
        raise bad_request(p, "is not a data: URL")
    left[(*where, "data_url_head")] = head
    if head.endswith(";base64"):
        return base64_bytes(payload, p)
    return payload.encode("utf-8", "surrogatepass")


def base64_bytes(v: Any, p: str) -> bytes:
    """Strict base64 of a body string (WireError naming `p` otherwise)."""
    if not isinstance(v, str):
        raise bad_request(p, "must be a base64 string")
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad_request(p, f"is not valid base64 ({exc})") from exc


def _opt(body: dict[str, Any], name: str, p: str) -> str | None:
    v = body.get(name)
    if v is not None and not isinstance(v, str):
        raise bad_request(f"{p}.{name}", "must be a string")
    return v
