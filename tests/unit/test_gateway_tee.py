"""Forwarding an upstream body (sidecar/gateway/tee.py): the piece after which the upstream
body has ended is sent as the end of the response (one write to the client, not a piece
and then an empty end), and the bytes and what is kept to store are the same either way."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sidecar.entries import ComputeCost
from sidecar.gateway.reply import Headers, Reply
from sidecar.gateway.tee import Answer, tee_body, whole_answer
from sidecar.wire.openai.keys import KeyedRequest

LIMIT = 1 << 20


class _Upstream:
    """A body arriving in `parts`; ended() after the last one, as aiohttp's at_eof()."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.left = len(parts)

    async def pieces(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            self.left -= 1
            yield part

    def ended(self) -> bool:
        return self.left == 0


def _recording() -> tuple[Reply, list[tuple[bytes, bool]]]:
    sent: list[tuple[bytes, bool]] = []

    async def start(status: int, headers: Headers) -> None:
        pass

    async def body(data: bytes, more: bool) -> None:
        sent.append((data, more))

    return Reply(start, body), sent


async def test_the_last_piece_ends_the_response() -> None:
    """Each piece as it arrives; the one after which the body has ended carries the end."""
    upstream = _Upstream([b'{"a":', b"1}"])
    reply, sent = _recording()
    answer = await tee_body(upstream.pieces(), reply, LIMIT, upstream.ended)
    assert sent == [(b'{"a":', True), (b"1}", False)]
    assert reply.finished
    assert answer is not None
    assert answer.payload == b'{"a":1}'


async def test_a_body_not_known_to_have_ended_gets_an_empty_end() -> None:
    """Without `ended` (or when the end is only seen after the last piece) the response
    ends with an empty last piece, as before."""
    reply, sent = _recording()
    upstream = _Upstream([b'{"a":1}'])
    answer = await tee_body(upstream.pieces(), reply, LIMIT)
    assert sent == [(b'{"a":1}', True), (b"", False)]
    assert answer is not None
    assert answer.payload == b'{"a":1}'


async def test_an_empty_body_ends_once() -> None:
    """No piece at all: one empty end."""
    reply, sent = _recording()
    upstream = _Upstream([])
    await tee_body(upstream.pieces(), reply, LIMIT, upstream.ended)
    assert sent == [(b"", False)]


def _body(**fields: Any) -> Answer:
    choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}}
    doc = {"model": "m", "choices": [choice | {"finish_reason": "stop"}]} | fields
    return Answer(json.dumps(doc).encode(), (), "")


KR = KeyedRequest(None, "m", stream=False, include_usage=False)


def test_a_whole_answer_is_read_once_with_its_usage() -> None:
    """The answer kept to store carries its usage's token counts (out of range: 0)."""
    kept = whole_answer(_body(usage={"prompt_tokens": 3, "completion_tokens": 2**32}), KR)
    assert kept is not None
    assert kept.cost == ComputeCost(prompt_tokens=3, completion_tokens=0)


def test_a_usage_that_is_not_an_object_counts_nothing() -> None:
    """`usage: [1]` is no token count (it used to raise after the response was sent,
    and the complete answer was not stored)."""
    kept = whole_answer(_body(usage=[1]), KR)
    assert kept is not None
    assert kept.cost == ComputeCost()


def test_an_unfinished_or_foreign_answer_is_not_kept() -> None:
    """As complete_body decides: a choice without finish_reason, another model."""
    unfinished = Answer(json.dumps({"model": "m", "choices": [{"index": 0}]}).encode(), (), "")
    assert whole_answer(unfinished, KR) is None
    assert whole_answer(_body(model="other"), KR) is None
    assert whole_answer(Answer(b"not json", (), ""), KR) is None
