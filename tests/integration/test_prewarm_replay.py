"""Prewarm replays only what it can reproduce: the exact model-server request a Store
attached, never one rebuilt from the key (real sidecars, real Redis, real model server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key
from infercache_client.builders import replay_request

from sidecar.testing import InProcessSidecar
from tests.support.checkpoints import llama_tensors, write_model
from tests.support.keys import key
from tests.support.model_server import answer_for, chat_prompt
from tests.support.prewarm import MODEL, final, pod, prewarm, text_key
from tests.support.processes import ModelServerProcess, RedisServer
from tests.support.sidecars import StartSidecar

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
# What the caller's gateway really sent: the tenant's system prompt (the key says it as
# prompt_version) and the tools. Odd spacing on purpose: it must reach the model as is.
MESSAGES = [
    {"role": "system", "content": "You are ACME's support bot. Answer formally."},
    {"role": "user", "content": "reset my password"},
]
BODY = json.dumps({"model": MODEL, "messages": MESSAGES, "tools": TOOLS}, indent=1).encode()


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny models: v1 and v2 weights (different fingerprints)."""
    root = tmp_path_factory.mktemp("weights")
    return {
        "v1": write_model(root / "v1", llama_tensors(layers=1, seed=1)),
        "v2": write_model(root / "v2", llama_tensors(layers=1, seed=2)),
    }


@pytest.fixture
def upstream() -> Iterator[ModelServerProcess]:
    """A model server process (each test starts it with the weights it needs)."""
    server = ModelServerProcess()
    yield server
    server.stop()


def settings(tmp_path: Path) -> dict[str, object]:
    """acme retains inputs (every hit is counted); a generous read deadline under load."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    return {"policy_file": str(policy), "lookup_timeout_ms": 2000}


def support_key(text: str, **kw: Any) -> pb.CacheKey:
    """A key of the "support-v3" prompt template (a system prompt the gateway adds)."""
    return make_key(tenant="acme", prompt_version="support-v3", text=text, temperature=0.0, **kw)


def from_version(model_version: str) -> admin_pb.PrewarmRequest:
    """A Prewarm of a version's 10 most-hit recorded requests."""
    return admin_pb.PrewarmRequest(
        from_version=admin_pb.PrewarmFromVersion(model_version=model_version, top_k=10)
    )


async def test_prewarm_never_rebuilds_a_request_from_the_key(
    weights: dict[str, Path],
    upstream: ModelServerProcess,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A v1 answer made with tools and one shaped by the tenant's template, stored without
    their model-server requests and hot on v1: prewarm on v2 skips both as not_replayable
    and calls nothing (it used to send the bare text and store the no-tools, no-template
    answer under the keys that say otherwise)."""
    with_tools = text_key("weather in Paris?", tools=TOOLS)
    templated = support_key("reset my password")
    upstream.start("v1")
    async with pod(weights["v1"], upstream, redis_server.url, **settings(tmp_path)) as v1:
        v1_version = (await v1.client.server_info()).model_version
        await v1.store(with_tools, b'{"tool_calls": [{"name": "get_weather"}]}')
        await v1.store(templated, b"Dear customer, please follow ...")
        for _ in range(3):
            for k in (with_tools, templated):
                assert (await v1.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
        assert v1.running.app.recorder is not None
        await v1.running.app.recorder.merge()

    upstream.start("v2")
    async with pod(weights["v2"], upstream, redis_server.url, **settings(tmp_path)) as v2:
        summary = final(await prewarm(v2, from_version(v1_version)))
        assert summary.state == admin_pb.PREWARM_STATE_COMPLETED
        assert (summary.total, summary.stored) == (2, 0)
        assert dict(summary.skipped_by_reason) == {"not_replayable": 2}
        assert summary.not_replayable == 2
        assert upstream.stats()["completions"] == 0
        for k in (with_tools, templated):
            assert (await v2.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_the_attached_request_is_replayed_byte_for_byte(
    weights: dict[str, Path],
    upstream: ModelServerProcess,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A Store and a StoreStream that attach their model-server requests: on v2, prewarm
    sends exactly those bodies and stores v2's answers to them under the same keys; the
    answers prewarm stores are replayable again (attached for the next weights)."""
    templated = support_key("reset my password", tools=TOOLS)
    streamed = support_key("streamed question")
    stream_body = b'{"model": "tiny",  "prompt": "SYSTEM: formal\\nstreamed question"}'
    upstream.start("v1")
    async with pod(weights["v1"], upstream, redis_server.url, **settings(tmp_path)) as v1:
        v1_version = (await v1.client.server_info()).model_version
        miss = await v1.client.lookup(templated)
        stored = await v1.client.store(
            templated,
            b"v1 answer",
            lease=miss.lease,
            replay=replay_request("/v1/chat/completions", BODY),
        )
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        miss = await v1.client.lookup(streamed)
        async with v1.client.store_stream(
            streamed, miss.lease, replay=replay_request("/v1/completions", stream_body)
        ) as w:
            await w.send("v1 ", tokens=1)
            await w.send("stream", tokens=1)
            w.finish("stop")
        for k in (templated, streamed):
            assert (await v1.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
        assert v1.running.app.recorder is not None
        await v1.running.app.recorder.merge()

    upstream.start("v2")
    async with pod(weights["v2"], upstream, redis_server.url, **settings(tmp_path)) as v2:
        v2_version = (await v2.client.server_info()).model_version
        summary = final(await prewarm(v2, from_version(v1_version)))
        assert (summary.total, summary.stored, summary.not_replayable) == (2, 2, 0)
        assert sorted(upstream.stats()["bodies"]) == sorted([BODY.decode(), stream_body.decode()])
        hit = await v2.client.lookup(templated)
        assert hit.payload.decode() == answer_for("v2", chat_prompt(MESSAGES))
        hit = await v2.client.lookup(streamed)
        assert hit.payload.decode() == answer_for("v2", "SYSTEM: formal\nstreamed question")
        assert v2.running.app.recorder is not None
        await v2.running.app.recorder.merge()
        again = final(await prewarm(v2, from_version(v2_version)))
        assert dict(again.skipped_by_reason) == {"already_cached": 2}


async def test_an_unusable_replay_request_is_refused_and_nothing_is_stored(
    start_sidecar: StartSidecar,
) -> None:
    """A replay request prewarm could not send (wrong path, not JSON, too large) is
    INVALID_ARGUMENT naming its field, before anything is stored."""
    sc: InProcessSidecar = await start_sidecar()
    k = key("refused")
    cases = [
        (replay_request("/v1/embeddings", b"{}"), "replay.path"),
        (
            replay_request("/v1/completions", b"{}", content_type="text/plain"),
            "replay.content_type",
        ),
        (replay_request("/v1/completions", b" " * (256 * 1024 + 1)), "replay.body"),
    ]
    for replay, field in cases:
        miss = await sc.client.lookup(k)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await sc.client.store(k, b"answer", lease=miss.lease, replay=replay)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith(field)
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
