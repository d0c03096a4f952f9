"""A cached answer as the response to a new request (no I/O).

A hit gets a fresh `id` and `created`, and (chat and completions) a `usage` saying
the whole prompt came from the cache (`as_cached`); everything else is the original
answer. A stored body is rewritten in place (those values only, the rest byte for
byte); a stored stream is replayed event by event, each rewritten the same way.
A request that streams may be answered from a stored body and the other way round
(`stream` is not part of the key): `events_from_body` and `body_from_events` convert,
and return None for anything they do not fully understand (the hit is then
treated as a miss, never answered approximately).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Sequence
from typing import Any

from sidecar.wire.openai.sse import event_doc, is_usage_only
from sidecar.wire.openai.whole_body import body_doc

_ID_PREFIX = {"chat.completions": "chatcmpl-", "completions": "cmpl-", "embeddings": "embd-"}


def fresh_id(kind: str) -> str:
    """A new response id in OpenAI's style (chatcmpl-..., cmpl-..., embd-...)."""
    return _ID_PREFIX.get(kind, "resp-") + secrets.token_hex(12)


ACCOUNTED = frozenset({"chat.completions", "completions"})
"""The endpoints whose usage a hit reports as served from the cache."""


def as_cached(usage: Any) -> Any:
    """A chat or completions `usage` for a hit: `prompt_tokens_details.cached_tokens`
    is the whole prompt (`prompt_tokens`), the details object made when the stored
    answer had none (vLLM sends it only with --enable-prompt-tokens-details); the rest
    as computed. A usage without an integer `prompt_tokens` is left as it is."""
    if not isinstance(usage, dict):
        return usage
    n = usage.get("prompt_tokens")
    if not isinstance(n, int) or isinstance(n, bool):
        return usage
    details = usage.get("prompt_tokens_details")
    details = dict(details) if isinstance(details, dict) else {}
    return {**usage, "prompt_tokens_details": details | {"cached_tokens": n}}


_USAGE = re.compile(rb'"usage"\s*:\s*')
_DECODER = json.JSONDecoder()


def _usage_replaced(data: bytes, usage: Any, fresh: Any) -> bytes | None:
    """`data` with its top-level `usage` member's value written as `fresh`, the rest
    byte for byte; None unless that member is the object's last (as vLLM and OpenAI
    write it) and reads back as `usage`."""
    matches = list(_USAGE.finditer(data))
    if not matches:
        return None
    found = matches[-1]
    try:
        tail = data[found.end() :].decode("utf-8")
        value, end = _DECODER.raw_decode(tail)
    except ValueError:
        return None
    rest = tail[end:]
    if value != usage or rest.strip() != "}":
        return None  # not the top-level member: rewritten whole instead
    return data[: found.end()] + _compact(fresh) + rest.encode("utf-8")


class Renewal:
    """Rewrites the original id, created and usage of an answer's body or events."""

    __slots__ = ("account", "created", "new_id")

    def __init__(self, kind: str) -> None:
        self.new_id = fresh_id(kind).encode()
        self.created = str(int(time.time())).encode()
        self.account = kind in ACCOUNTED
        """Whether usage is reported as served from the cache (ACCOUNTED)."""

    def usage(self, usage: Any) -> Any:
        """`usage` as this hit reports it."""
        return as_cached(usage) if self.account else usage

    def apply(self, data: bytes, doc: dict[str, Any], *, event: bool = False) -> bytes:
        """`data` (whose parsed value is `doc`) with doc's id and created replaced.

        The original values are replaced where they appear as written; if the text
        spells them otherwise (escapes), the document is re-serialised instead
        (`event`: as one SSE event).
        """
        old_id, old_created = doc.get("id"), doc.get("created")
        if isinstance(old_id, str):
            spelled = re.escape(json.dumps(old_id, ensure_ascii=False).encode())
            fresh = b'"' + self.new_id + b'"'
            # The separator as written is kept: only the value's bytes change.
            data, n = re.subn(
                rb'("id"\s*:\s*)' + spelled, lambda m: m.group(1) + fresh, data, count=1
            )
            if n == 0:
                return self._reserialised(doc, event)
        if isinstance(old_created, int) and not isinstance(old_created, bool):
            pattern = rb'("created"\s*:\s*)' + str(old_created).encode() + rb"(?![0-9.eE])"
            data, n = re.subn(pattern, lambda m: m.group(1) + self.created, data, count=1)
            if n == 0:
                return self._reserialised(doc, event)
        usage = doc.get("usage")
        if isinstance(usage, dict):
            fresh = self.usage(usage)
            if fresh is not usage:
                replaced = _usage_replaced(data, usage, fresh)
                return self._reserialised(doc, event) if replaced is None else replaced
        return data

    def _reserialised(self, doc: dict[str, Any], event: bool) -> bytes:
        fresh = dict(doc)
        if "id" in fresh:
            fresh["id"] = self.new_id.decode()
        if "created" in fresh:
            fresh["created"] = int(self.created)
        if "usage" in fresh:
            fresh["usage"] = self.usage(fresh["usage"])
        return _sse(fresh) if event else _compact(fresh)


def replay_events(
    events: Sequence[bytes], include_usage: bool, renewal: Renewal
) -> list[bytes | None] | None:
    """The stored events for a streaming request, renewed, by position (None: not sent:
    the usage chunk when not asked for). None when the stored events are not an OpenAI
    stream, or when asked for usage that the stored stream does not carry."""
    out: list[bytes | None] = []
    had_usage = False
    for event in events:
        doc = event_doc(event)
        if doc is None:
            return None  # not a stream this gateway stored
        if is_usage_only(doc):
            had_usage = True
            if not include_usage:
                out.append(None)
                continue
        out.append(renewal.apply(event, doc, event=True))
    if include_usage and not had_usage:
        return None
    return out


def _compact(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + _compact(doc) + b"\n\n"


_TOP = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint"})
"""The top-level fields a conversion carries over; any other must be null (vLLM sends
`prompt_logprobs: null` and the like), or the answer is not converted: vLLM's
`prompt_token_ids` or `prompt_text`, say, have no place in the other form."""
_BODY_CHOICE = {
    "chat.completions": frozenset({"index", "message", "logprobs", "finish_reason", "stop_reason"}),
    "completions": frozenset({"index", "text", "logprobs", "finish_reason", "stop_reason"}),
}


def _only(doc: dict[str, Any], known: frozenset[str]) -> bool:
    """Whether every field of `doc` outside `known` is null."""
    return all(x is None for k, x in doc.items() if k not in known)


def events_from_body(
    payload: bytes, kind: str, include_usage: bool, renewal: Renewal
) -> list[bytes] | None:
    """A stored whole answer as stream events: one chunk per choice, then usage."""
    doc = body_doc(payload)
    if doc is None or not isinstance(doc.get("choices"), list) or not _only(doc, _TOP):
        return None
    known = _BODY_CHOICE.get(kind)
    if known is None:
        return None
    head = {
        "id": renewal.new_id.decode(),
        "object": "chat.completion.chunk" if kind == "chat.completions" else "text_completion",
        "created": int(renewal.created),
        "model": doc.get("model"),
    }
    if "system_fingerprint" in doc:
        head["system_fingerprint"] = doc["system_fingerprint"]
    out = []
    for ch in doc["choices"]:
        if not isinstance(ch, dict) or not _only(ch, known):
            return None  # e.g. vLLM's token_ids (return_token_ids)
        piece: dict[str, Any] = {"index": ch.get("index", 0)}
        if kind == "chat.completions":
            message = ch.get("message")
            if not isinstance(message, dict):
                return None
            delta = {k: x for k, x in message.items() if x is not None}
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                delta["tool_calls"] = [
                    {"index": i, **c} if isinstance(c, dict) else c for i, c in enumerate(calls)
                ]
            piece["delta"] = delta
        else:
            piece["text"] = ch.get("text", "")
        piece["logprobs"] = ch.get("logprobs")
        piece["finish_reason"] = ch.get("finish_reason")
        if "stop_reason" in ch:
            piece["stop_reason"] = ch["stop_reason"]
        out.append(_sse(head | {"choices": [piece]}))
    if include_usage:
        if not isinstance(doc.get("usage"), dict):
            return None
        out.append(_sse(head | {"choices": [], "usage": renewal.usage(doc["usage"])}))
    return out


_CHAT_DELTA = frozenset({"role", "content", "tool_calls", "reasoning_content", "reasoning"})
_CHOICE = frozenset({"index", "delta", "text", "logprobs", "finish_reason", "stop_reason"})


def body_from_events(events: Sequence[bytes], kind: str, renewal: Renewal) -> bytes | None:
    """A stored stream as one whole answer (content, tool calls and logprobs joined)."""
    chat = kind == "chat.completions"
    choices: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    usage = None
    for event in events:
        doc = event_doc(event)
        if doc is None or not _only(doc, _TOP):
            return None  # e.g. vLLM's prompt_token_ids or prompt_text on the first chunk
        if not head:
            head = {"model": doc.get("model")}
            if "system_fingerprint" in doc:
                head["system_fingerprint"] = doc["system_fingerprint"]
        if isinstance(doc.get("usage"), dict):
            usage = doc["usage"]
        for ch in doc.get("choices") or ():
            if not isinstance(ch, dict) or set(ch) - _CHOICE:
                return None
            if not isinstance(ch.get("index"), int):
                return None
            acc = choices.setdefault(ch["index"], {"text": [], "reasoning": [], "calls": {}})
            if not _join(acc, ch, chat):
                return None
    if not choices or usage is None:
        # A whole answer always reports its usage (vLLM's and OpenAI's do; clients do
        # their accounting with it): a stream stored without its usage chunk cannot
        # answer a non-streaming request completely.
        return None
    doc_out: dict[str, Any] = {
        "id": renewal.new_id.decode(),
        "object": "chat.completion" if chat else "text_completion",
        "created": int(renewal.created),
        **head,
        "choices": [_choice(i, choices[i], chat) for i in sorted(choices)],
    }
    doc_out["usage"] = renewal.usage(usage)
    return _compact(doc_out)


def _join(acc: dict[str, Any], ch: dict[str, Any], chat: bool) -> bool:
    if ch.get("finish_reason") is not None:
        acc["finish_reason"] = ch["finish_reason"]
    if "stop_reason" in ch:
        acc["stop_reason"] = ch["stop_reason"]
    lp = ch.get("logprobs")
    if lp is not None and not _join_logprobs(acc, lp):
        return False
    if not chat:
        text = ch.get("text", "")
        if not isinstance(text, str):
            return False
        acc["text"].append(text)
        return True
    delta = ch.get("delta")
    if not isinstance(delta, dict) or set(delta) - _CHAT_DELTA:
        return False
    if isinstance(delta.get("role"), str):
        acc["role"] = delta["role"]
    for name, into in (("content", "text"), ("reasoning_content", "reasoning")):
        piece = delta.get(name)
        if piece is not None:
            if not isinstance(piece, str):
                return False
            acc[into].append(piece)
    if delta.get("reasoning") is not None:
        if not isinstance(delta["reasoning"], str):
            return False
        acc["reasoning"].append(delta["reasoning"])
    for call in delta.get("tool_calls") or ():
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            return False
        slot = acc["calls"].setdefault(call["index"], {"args": []})
        for name in ("id", "type"):
            if call.get(name) is not None:
                slot[name] = call[name]
        fn = call.get("function") or {}
        if fn.get("name") is not None:
            slot["name"] = fn["name"]
        if fn.get("arguments") is not None:
            slot["args"].append(fn["arguments"])
    return True


def _join_logprobs(acc: dict[str, Any], lp: Any) -> bool:
    if not isinstance(lp, dict):
        return False
    joined = acc.setdefault("logprobs", {})
    for name, items in lp.items():
        if not isinstance(items, list):
            return False
        joined.setdefault(name, []).extend(items)
    return True


def _choice(index: int, acc: dict[str, Any], chat: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index}
    if chat:
        text = "".join(acc["text"])
        message: dict[str, Any] = {
            "role": acc.get("role", "assistant"),
            # A turn that only calls tools has content null, as the whole answer says it,
            # even when its stream sent empty content pieces.
            "content": text if text or not acc["calls"] else None,
        }
        if acc["reasoning"]:
            message["reasoning_content"] = "".join(acc["reasoning"])
        if acc["calls"]:
            message["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": c.get("type", "function"),
                    "function": {"name": c.get("name"), "arguments": "".join(c["args"])},
                }
                for _, c in sorted(acc["calls"].items())
            ]
        out["message"] = message
    else:
        out["text"] = "".join(acc["text"])
    out["logprobs"] = acc.get("logprobs")
    out["finish_reason"] = acc.get("finish_reason")
    if "stop_reason" in acc:
        out["stop_reason"] = acc["stop_reason"]
    return out
