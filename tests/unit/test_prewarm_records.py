"""Hit records: the key's wire form and the exact model-server request, nothing rebuilt."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from infercache.v1 import cache_pb2 as pb

from sidecar.api.cache_codec import hit_record_from_pb, key_request_from_pb, key_request_from_record
from sidecar.errors import InvalidArgument
from sidecar.keys import build_key
from sidecar.prewarm import records
from sidecar.prewarm.progress import PrewarmItem
from sidecar.prewarm.records import MAX_REPLAY_BYTES, HitRecord, ReplayRequest
from sidecar.wire.openai.routes import CHAT_PATH, AnswerForm

REPLAY = ReplayRequest(CHAT_PATH, "application/json", b'{"model":"m","messages":[]}')
BASE = {"tenant": "acme", "modelVersion": "fp1-v1", "promptVersion": "p", "text": "q"}


@pytest.mark.parametrize(
    "changes",
    [
        {"tools": ['{"type":"function"}']},
        {"toolChoice": "auto"},
        {"parallelToolCalls": False},
        {"endpoint": "embeddings"},
        {"chatTemplate": {"addGenerationPrompt": False}},
        {"output": {"suffix": "x"}},
        {"sampling": {"badWords": ["x"]}},
        {"sampling": {"returnLogprobs": True}},
        {"sampling": {"guided": {"regex": "a+"}}},
        {"sampling": {"responseFormat": {"type": "RESPONSE_FORMAT_TYPE_JSON_OBJECT"}}},
        {"extra": {"tenant_style": "formal"}, "adapterVersion": "sql"},
        {"text": None, "chat": {"messages": [{"role": "assistant"}]}},
        {"text": None, "chat": {"messages": [{"role": "user", "content": "x", "name": "a"}]}},
    ],
    ids=lambda c: "-".join(c),
)
def test_every_key_field_survives_a_record(changes: dict[str, Any]) -> None:
    """Tools, templates, output options, guided decoding, extra context...: a record keeps
    the key's wire form, so prewarm rebuilds exactly the key the answer was stored under
    (under the new weights' version), whatever fields it uses."""
    doc = {k: v for k, v in (BASE | changes).items() if v is not None}
    original = ParseDict(doc, pb.CacheKey())
    record = records.decode(records.encode(hit_record_from_pb(original, REPLAY)))
    assert record.replay == REPLAY
    assert b"fp1-v1" not in record.key
    rebuilt = key_request_from_record(record.key)
    assert rebuilt.model_version == ""
    expected = build_key(key_request_from_pb(original))
    assert build_key(rebuilt, default_model_version="fp1-v1") == expected


def test_records_written_before_attached_requests_are_old() -> None:
    """A version-2 record (rebuilt from the key by earlier sidecars) is OldRecord: skipped
    not_replayable, never replayed; garbage is BadRecord."""
    with pytest.raises(records.OldRecord):
        records.decode(b'{"v": 2, "tenant": "acme", "text": "q"}')
    for damaged in (b"\xff", b'{"v": 9}', b'{"v": 3, "key": "!!", "replay": []}'):
        with pytest.raises(records.BadRecord):
            records.decode(damaged)


def test_record_bodies_round_trip_byte_for_byte() -> None:
    """Any bytes of the body (spacing, key order, non-ASCII) come back unchanged."""
    body = '{"prompt":"hé",  "model":"m"}'.encode()
    record = HitRecord(b"\x0a\x01k", ReplayRequest("/v1/completions", "application/json", body))
    data = records.encode(record)
    assert records.decode(data) == record
    assert json.loads(data)["key"] == base64.b64encode(b"\x0a\x01k").decode()


@pytest.mark.parametrize(
    ("replay", "field"),
    [
        (ReplayRequest("/v1/embeddings", "application/json", b"{}"), "replay.path"),
        (ReplayRequest(CHAT_PATH, "text/plain", b"{}"), "replay.content_type"),
        (ReplayRequest(CHAT_PATH, "application/json", b""), "replay.body"),
        (ReplayRequest(CHAT_PATH, "application/json", b"\xff{}"), "replay.body"),
        (
            ReplayRequest(CHAT_PATH, "application/json", b" " * (MAX_REPLAY_BYTES + 1)),
            "replay.body",
        ),
    ],
    ids=["path", "content_type", "empty", "not_utf8", "too_large"],
)
def test_unusable_replay_requests_are_invalid(replay: ReplayRequest, field: str) -> None:
    """A request prewarm could not send is refused at Store, naming its field."""
    with pytest.raises(InvalidArgument) as err:
        replay.check()
    assert err.value.field == field


def test_json_with_parameters_is_accepted() -> None:
    """application/json; charset=utf-8 is JSON."""
    ReplayRequest(CHAT_PATH, "application/json; charset=utf-8", b"{}").check()


STREAMED = ReplayRequest(CHAT_PATH, "application/json", b'{"model":"m","stream":true}')


def test_gateway_records_keep_their_answer_form() -> None:
    """Version 4 names the form (json / sse) and reads back the same; a version 3 record
    reads as form-less (INFERCACHE_PREWARM_PAYLOAD decides, as before); a form this
    version does not know is BadRecord."""
    for form in (AnswerForm.JSON, AnswerForm.SSE, None):
        record = HitRecord(b"k", STREAMED, form)
        assert records.decode(records.encode(record)) == record
    v3 = json.loads(records.encode(HitRecord(b"k", REPLAY)))
    assert v3.pop("v") == 4
    assert "form" not in v3
    old = records.decode(json.dumps(v3 | {"v": 3, "form": "sse"}).encode())
    assert old == HitRecord(b"k", REPLAY)  # a 3 has no form, whatever it holds
    with pytest.raises(records.BadRecord):
        records.decode(json.dumps(v3 | {"v": 4, "form": "xml"}).encode())


def test_a_formless_streamed_request_is_not_replayable() -> None:
    """A record without a form whose body streams cannot be stored rightly (SSE is
    neither payload setting): not replayable, and not counted replayable; with a form, or
    without stream, it is."""
    req = key_request_from_pb(ParseDict(BASE, pb.CacheKey()))
    assert HitRecord(b"k", STREAMED).unreplayable()
    assert not PrewarmItem(req, record=HitRecord(b"k", STREAMED)).replayable
    for record in (HitRecord(b"k", STREAMED, AnswerForm.SSE), HitRecord(b"k", REPLAY)):
        assert not record.unreplayable()
        assert PrewarmItem(req, record=record).replayable
    not_json = ReplayRequest(CHAT_PATH, "application/json", b"{not json")
    assert not not_json.streams()
