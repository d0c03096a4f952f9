"""Prewarm's record of what was really sent: for tenants whose policy retains inputs,
a stored answer's exact upstream request body is attached to its hit ranking, so a
prewarm replays it verbatim (sidecar/prewarm/records.py), never a reconstruction.
The record names the form the gateway stores the answer in (a streamed request's
SSE events, else the whole JSON body), so prewarm stores the new answer in the same
form whatever INFERCACHE_PREWARM_PAYLOAD says."""

from __future__ import annotations

from collections.abc import Callable

from sidecar.keys import CacheKey, KeyRequest
from sidecar.prewarm.hits import HitRecorder
from sidecar.prewarm.records import (
    GATEWAY_PATHS,
    JSON_TYPE,
    MAX_REPLAY_BYTES,
    HitRecord,
    ReplayRequest,
)
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.routes import AnswerForm

KeyEncoder = Callable[[KeyRequest], bytes]
"""A KeyRequest as a record's key bytes (the CacheKey wire form, no model version)."""


class Recording:
    """Attaches the upstream body of each stored answer (retaining tenants only)."""

    def __init__(self, recorder: HitRecorder, encode_key: KeyEncoder) -> None:
        self._recorder = recorder
        self._encode_key = encode_key

    def attach(self, key: CacheKey, kr: KeyedRequest, path: str, body: bytes, ttl_s: int) -> None:
        """Keep `body` (sent to `path`) as the replay of `key`'s entry, if allowed."""
        if kr.key is None or path not in GATEWAY_PATHS or len(body) > MAX_REPLAY_BYTES:
            return
        if kr.traits.private_data or not self._recorder.retains(key.tenant):
            return  # before the record is built: encoding its key is most of the cost
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return
        # A streamed request is stored as SSE when the upstream streams (flow.py); one
        # that answered it with JSON anyway is stored whole, and prewarm does the same.
        form = AnswerForm.SSE if kr.stream else AnswerForm.JSON
        replay = ReplayRequest(path, JSON_TYPE, body)
        record = HitRecord(self._encode_key(kr.key), replay, form)
        self._recorder.attach(key.tenant, key.model_version, key.digest, record, ttl_s=ttl_s)
