"""Prewarm helpers: a fingerprinting pod with a model server, the requests callers attach,
and running a Prewarm to its summary."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from tests.support.processes import ModelServerProcess
from tests.support.sidecars import Sidecar, bearer, config_overrides, fleet_sidecar

MODEL = "tiny"


@asynccontextmanager
async def pod(
    model_dir: Path, upstream: ModelServerProcess, redis_url: str | None = None, **settings: Any
) -> AsyncIterator[Sidecar]:
    """An in-process sidecar fingerprinting `model_dir`, prewarming from `upstream`."""
    base: dict[str, Any] = {
        "freshness_bound_ms": 500,
        "model_path": str(model_dir),
        "model_server_url": upstream.url,
        "model_server_model": MODEL,
    }
    settings = config_overrides(redis_url, **(base | settings))
    async with fleet_sidecar(settings, fingerprint=True) as sc:
        yield sc


def text_key(text: str, tenant: str = "acme", **kw: Any) -> pb.CacheKey:
    """A key with no model_version (= the pod's model), temperature 0."""
    return make_key(tenant=tenant, prompt_version="p1", text=text, temperature=0.0, **kw)


def replay_for(k: pb.CacheKey, model: str = "") -> pb.ReplayRequest:
    """The model-server request a caller sent for `k` (its input and temperature, to the
    adapter's served name or MODEL): what it attaches to its Store. None for a hashed
    input (an empty ReplayRequest: nothing to replay)."""
    body: dict[str, Any] = {"model": model or k.adapter_version or MODEL, "stream": False}
    if k.sampling.HasField("temperature"):
        body["temperature"] = k.sampling.temperature
    which = k.WhichOneof("input")
    if which == "text":
        body["prompt"] = k.text
        path = "/v1/completions"
    elif which == "token_ids":
        body["prompt"] = list(k.token_ids.ids)
        path = "/v1/completions"
    elif which == "chat":
        body["messages"] = [{"role": m.role, "content": m.content} for m in k.chat.messages]
        path = "/v1/chat/completions"
    else:
        return pb.ReplayRequest()
    return pb.ReplayRequest(
        path=path, content_type="application/json", body=json.dumps(body).encode()
    )


def file_request(*keys: pb.CacheKey, **options: Any) -> admin_pb.PrewarmRequest:
    """A Prewarm of inline requests, each with the request its caller sent."""
    return admin_pb.PrewarmRequest(
        requests=admin_pb.PrewarmRequestList(keys=keys, replays=[replay_for(k) for k in keys]),
        **options,
    )


async def prewarm(sc: Sidecar, request: admin_pb.PrewarmRequest) -> list[Any]:
    """Every progress message of one run."""
    call = sc.admin.Prewarm(request, metadata=bearer(), timeout=60)
    return [p async for p in call]


def final(messages: list[Any]) -> Any:
    """The summary: the last message, the only one not RUNNING."""
    assert messages, "the stream must end with a summary"
    *before, last = messages
    assert all(m.state == admin_pb.PREWARM_STATE_RUNNING for m in before)
    assert last.state != admin_pb.PREWARM_STATE_RUNNING
    return last
