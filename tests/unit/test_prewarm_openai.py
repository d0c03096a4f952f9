"""Mapping cache requests to OpenAI-compatible calls, and answers back to payloads."""

from __future__ import annotations

import json

import pytest

from sidecar.keys import ChatMessage, FormatType, InputKind, KeyRequest, ResponseFormat, Sampling
from sidecar.prewarm.openai import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    BadAnswer,
    NotReplayable,
    PayloadFormat,
    parse_answer,
    upstream_call,
)

TEXT = PayloadFormat.TEXT


def request(value: object, kind: InputKind, **sampling: object) -> KeyRequest:
    return KeyRequest(
        tenant="t",
        model_version="",
        prompt_version="p",
        input=value,  # type: ignore[arg-type]
        input_kind=kind,
        sampling=Sampling(**sampling),  # type: ignore[arg-type]
    )


def test_text_goes_to_completions_with_only_the_fields_set() -> None:
    """Unset sampling fields are left to the engine default, as the key assumed."""
    call = upstream_call(request("hi", InputKind.TEXT, temperature=0.0, top_k=5), "m", TEXT)
    assert call.path == COMPLETIONS_PATH
    assert call.body == {
        "model": "m",
        "stream": False,
        "prompt": "hi",
        "temperature": 0.0,
        "top_k": 5,
    }


def test_chat_goes_to_chat_completions_with_logprobs_in_chat_form() -> None:
    """Chat messages keep their order and names; logprobs become top_logprobs."""
    msgs = (ChatMessage("system", "s"), ChatMessage("user", "u", name="ann"))
    call = upstream_call(
        request(msgs, InputKind.CHAT, logprobs=3, stop=("x",), max_tokens=7), "m", TEXT
    )
    assert call.path == CHAT_PATH
    assert call.body["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u", "name": "ann"},
    ]
    assert (call.body["logprobs"], call.body["top_logprobs"]) == (True, 3)
    assert (call.body["stop"], call.body["max_tokens"]) == (["x"], 7)


def test_token_ids_are_a_completions_prompt_list() -> None:
    """Token-id inputs are sent as a list of ints."""
    call = upstream_call(request((1, 2, 3), InputKind.TOKENS), "m", TEXT)
    assert call.body["prompt"] == [1, 2, 3]


def test_json_schema_is_sent_and_regex_is_not_replayable() -> None:
    """A JSON schema maps to response_format; a regex constraint has no portable field."""
    schema = ResponseFormat(FormatType.JSON_SCHEMA, '{"type": "object"}')
    call = upstream_call(request("q", InputKind.TEXT, response_format=schema), "m", TEXT)
    assert call.body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    regex = ResponseFormat(FormatType.REGEX, "[a-z]+")
    with pytest.raises(NotReplayable) as err:
        upstream_call(request("q", InputKind.TEXT, response_format=regex), "m", TEXT)
    assert err.value.reason == "unsupported_param"


def test_hashed_input_and_several_choices_as_text_are_not_replayable() -> None:
    """A caller-hashed input has no text; n > 1 cannot be one text payload."""
    with pytest.raises(NotReplayable) as err:
        upstream_call(request(b"\0" * 32, InputKind.SHA256), "m", TEXT)
    assert err.value.reason == "not_replayable"
    with pytest.raises(NotReplayable):
        upstream_call(request("q", InputKind.TEXT, n=2), "m", TEXT)
    assert upstream_call(request("q", InputKind.TEXT, n=2), "m", PayloadFormat.OPENAI_JSON)


def _body(**doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_parse_answer_extracts_text_and_usage() -> None:
    """The first choice's text is the payload; usage becomes the cost."""
    call = upstream_call(request("q", InputKind.TEXT), "m", TEXT)
    body = _body(
        model="m", choices=[{"text": "ans"}], usage={"prompt_tokens": 4, "completion_tokens": 2}
    )
    answer = parse_answer(call, "m", body, TEXT)
    assert (answer.payload, answer.prompt_tokens, answer.completion_tokens) == (b"ans", 4, 2)
    assert parse_answer(call, "m", body, PayloadFormat.OPENAI_JSON).payload == body


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>", "upstream_bad_response"),
        (_body(model="other", choices=[{"text": "a"}]), "wrong_model"),
        (_body(model="m", choices=[]), "upstream_bad_response"),
        (_body(model="m", choices=[{"message": {"content": "a"}}]), "upstream_bad_response"),
    ],
)
def test_unusable_answers_are_refused(body: bytes, reason: str) -> None:
    """Not JSON, another model, no choices or the wrong shape: BadAnswer with a reason."""
    call = upstream_call(request("q", InputKind.TEXT), "m", TEXT)
    with pytest.raises(BadAnswer) as err:
        parse_answer(call, "m", body, TEXT)
    assert err.value.reason == reason


def test_max_tokens_zero_is_sent_as_set() -> None:
    """Key schema v2 keeps max_tokens 0 apart from unset, so prewarm sends exactly what was
    set (schema v1's prewarm dropped 0 and stored the unset request's answer under it)."""
    call = upstream_call(request("hi", InputKind.TEXT, max_tokens=0), "m", TEXT)
    assert call.body["max_tokens"] == 0
    assert "max_tokens" not in upstream_call(request("hi", InputKind.TEXT), "m", TEXT).body
