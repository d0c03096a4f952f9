"""What shadow verification compares of two answers to one request (no I/O).

Compared exactly, per choice (by index): the text (a chat message's content, a
completion's text), the reasoning text, every tool call's type, function name and
argument string, and the finish_reason; and the number of choices. Not compared: ids,
`created`, `model`, usage, logprobs and `system_fingerprint` (they differ between two
runs of the same computation, or describe it rather than answer). A stream and a whole
body of the same answer compare equal: a stream's deltas are joined first.
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.wire.openai.sse import EventSplitter, event_doc, is_done

Choice = tuple[int, str, str, tuple[tuple[str, str, str], ...], str]
"""(index, text, reasoning, tool calls as (type, name, arguments), finish_reason)."""
Comparable = tuple[Choice, ...]


def comparable(payload: bytes) -> Comparable | None:
    """The compared part of a stored or fresh answer (a JSON body or SSE events); None
    when it is neither (then nothing is judged)."""
    head = payload.lstrip()[:6]
    if head.startswith((b"data:", b":", b"event:")):
        return _from_events(payload)
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list):
        return None
    out = []
    for ch in doc["choices"]:
        if not isinstance(ch, dict) or not isinstance(ch.get("index"), int):
            return None
        msg = ch.get("message")
        if isinstance(msg, dict):
            text = _str(msg.get("content"))
            reasoning = _str(msg.get("reasoning_content") or msg.get("reasoning"))
            calls = _calls(msg.get("tool_calls"))
        else:
            text, reasoning, calls = _str(ch.get("text")), "", ()
        out.append((ch["index"], text, reasoning, calls, _str(ch.get("finish_reason"))))
    return tuple(sorted(out))


def same_answer(a: bytes, b: bytes) -> bool | None:
    """Do two answers agree on everything compared? None when either cannot be read."""
    left, right = comparable(a), comparable(b)
    if left is None or right is None:
        return None
    return left == right


def first_text(answer: Comparable) -> bytes:
    """The first choice's text as UTF-8: what a caller that stores the text form keeps
    (INFERCACHE_PREWARM_PAYLOAD=text, answers.parse_answer)."""
    return answer[0][1].encode("utf-8") if answer else b""


def _from_events(payload: bytes) -> Comparable | None:
    splitter = EventSplitter(len(payload) + 1)
    events = splitter.feed(payload if payload.endswith(b"\n\n") else payload + b"\n\n")
    acc: dict[int, dict[str, Any]] = {}
    for event in events:
        if is_done(event):
            continue
        doc = event_doc(event)
        if doc is None:
            continue
        for ch in doc.get("choices") or ():
            if not isinstance(ch, dict) or not isinstance(ch.get("index"), int):
                return None
            a = acc.setdefault(ch["index"], {"text": [], "reasoning": [], "calls": {}, "end": ""})
            delta = ch.get("delta")
            if isinstance(delta, dict):
                a["text"].append(_str(delta.get("content")))
                a["reasoning"].append(
                    _str(delta.get("reasoning_content") or delta.get("reasoning"))
                )
                for call in delta.get("tool_calls") or ():
                    if not isinstance(call, dict):
                        return None
                    slot = a["calls"].setdefault(call.get("index", 0), ["", "", []])
                    fn = _dict(call.get("function"))
                    slot[0] = _str(call.get("type")) or slot[0]
                    slot[1] += _str(fn.get("name"))
                    slot[2].append(_str(fn.get("arguments")))
            else:
                a["text"].append(_str(ch.get("text")))
            if ch.get("finish_reason"):
                a["end"] = _str(ch.get("finish_reason"))
    out = []
    for index, a in acc.items():
        calls = tuple(
            (kind or "function", name, "".join(args))
            for _, (kind, name, args) in sorted(a["calls"].items())
        )
        out.append((index, "".join(a["text"]), "".join(a["reasoning"]), calls, a["end"]))
    return tuple(sorted(out))


def _calls(raw: Any) -> tuple[tuple[str, str, str], ...]:
    out = []
    for call in raw if isinstance(raw, list) else ():
        if isinstance(call, dict):
            fn = _dict(call.get("function"))
            out.append(
                (
                    _str(call.get("type")) or "function",
                    _str(fn.get("name")),
                    _str(fn.get("arguments")),
                )
            )
    return tuple(out)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
