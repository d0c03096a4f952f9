"""Prewarm against a real OpenAI-compatible model server process and real sidecars."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
import redis
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from tests.support.checkpoints import llama_tensors, lora_tensors, write_adapter, write_model
from tests.support.model_server import answer_for, chat_prompt, token_prompt
from tests.support.prewarm import MODEL, file_request, final, pod, prewarm, text_key
from tests.support.processes import ModelServerProcess, RedisServer
from tests.support.sidecars import Sidecar, bearer, run_cli


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny safetensors models: v1 and v2 weights (different fingerprints)."""
    root = tmp_path_factory.mktemp("weights")
    return {
        "v1": write_model(root / "v1", llama_tensors(layers=1, seed=1)),
        "v2": write_model(root / "v2", llama_tensors(layers=1, seed=2)),
    }


@pytest.fixture
def upstream() -> Iterator[ModelServerProcess]:
    """A model server process (started by each test with the weights it needs)."""
    server = ModelServerProcess()
    yield server
    server.stop()


async def test_prewarm_from_requests_fills_the_cache(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """Text, chat and token-id requests are computed upstream and stored; a Lookup then
    HITs with the model server's answer, and a second run skips them all."""
    upstream.start("v1")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    chat = make_key(tenant="acme", prompt_version="p1", chat=messages, temperature=0.0)
    tokens = make_key(tenant="acme", prompt_version="p1", token_ids=[5, 6, 7])
    keys = [text_key("How do I reset my password?"), chat, tokens]
    expected = [
        answer_for("v1", "How do I reset my password?"),
        answer_for("v1", chat_prompt(messages)),
        answer_for("v1", token_prompt([5, 6, 7])),
    ]
    async with pod(weights["v1"], upstream) as sc:
        info = await sc.client.server_info()
        summary = final(await prewarm(sc, file_request(*keys)))
        assert summary.state == admin_pb.PREWARM_STATE_COMPLETED
        assert (summary.total, summary.done, summary.stored) == (3, 3, 3)
        assert summary.model_version == info.model_version
        for k, answer in zip(keys, expected, strict=True):
            hit = await sc.client.lookup(k)
            assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
            assert hit.payload.decode() == answer
            assert hit.cost.completion_tokens == 3
        assert upstream.stats()["completions"] == 3

        again = final(await prewarm(sc, file_request(*keys)))
        assert again.stored == 0
        assert dict(again.skipped_by_reason) == {"already_cached": 3}
        assert upstream.stats()["completions"] == 3, "cached keys are not sent upstream"


async def test_adapter_requests_go_to_the_adapter_model(
    weights: dict[str, Path], upstream: ModelServerProcess, tmp_path: Path
) -> None:
    """A request naming a configured LoRA adapter is sent with the adapter's served name
    and stored under the adapter's fingerprint; an adapter the model server does not
    serve is skipped."""
    adapter = write_adapter(tmp_path / "sql", lora_tensors(layers=1))
    upstream.start("v1", models=(MODEL, "sql"))
    async with pod(weights["v1"], upstream, adapters=f"sql={adapter}") as sc:
        info = await sc.client.server_info()
        by_name = text_key("select", adapter_version="sql")
        unknown = text_key("select", adapter_version="not-configured")
        summary = final(await prewarm(sc, file_request(by_name, unknown)))
        assert summary.stored == 1
        assert dict(summary.skipped_by_reason) == {"adapter_not_served": 1}
        assert upstream.stats()["models"] == ["sql"]
        by_fingerprint = text_key("select", adapter_version=info.adapter_versions["sql"])
        hit = await sc.client.lookup(by_fingerprint)
        assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
        assert hit.payload.decode() == answer_for("v1", "select")
        plain = await sc.client.lookup(text_key("select"))
        assert plain.outcome == pb.LOOKUP_OUTCOME_MISS


async def test_upstream_failures_are_counted_and_nothing_is_stored(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """An HTTP 500, a timeout and an answer from another model are failures by reason;
    a caller-hashed input is skipped; only the good request is stored."""
    upstream.start("v1", slow_s=3.0)
    good = text_key("fine")
    bad = [text_key("[[error]]"), text_key("[[slow]]"), text_key("[[wrong-model]]")]
    hashed = make_key(tenant="acme", prompt_version="p1", input_sha256=b"\x01" * 32)
    async with pod(weights["v1"], upstream, prewarm_timeout_s=1) as sc:
        messages = await prewarm(sc, file_request(good, *bad, hashed))
        summary = final(messages)
        assert summary.state == admin_pb.PREWARM_STATE_COMPLETED
        assert (summary.total, summary.stored, summary.failed, summary.skipped) == (5, 1, 3, 1)
        assert dict(summary.failed_by_reason) == {
            "upstream_http_500": 1,
            "upstream_timeout": 1,
            "wrong_model": 1,
        }
        assert dict(summary.skipped_by_reason) == {"not_replayable": 1}
        reported = {i.index: i.reason for m in messages for i in m.items}
        assert reported == {
            1: "upstream_http_500",
            2: "upstream_timeout",
            3: "wrong_model",
            4: "not_replayable",
        }
        for k in bad:
            assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
        hit = await sc.client.lookup(good)
        assert hit.payload.decode() == answer_for("v1", "fine")


async def test_model_server_serving_another_model_fails_the_run(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """When GET /v1/models does not list the expected model, no completion is requested,
    every request counts as failed and the final state says why."""
    upstream.start("v1", models=("something-else",))
    async with pod(weights["v1"], upstream) as sc:
        summary = final(await prewarm(sc, file_request(text_key("a"), text_key("b"))))
        assert summary.state == admin_pb.PREWARM_STATE_FAILED
        assert "something-else" in summary.error
        assert repr(MODEL) in summary.error
        assert (summary.failed, summary.stored) == (2, 0)
        assert dict(summary.failed_by_reason) == {"model_server_check": 2}
        assert upstream.stats()["completions"] == 0
        assert (await sc.client.lookup(text_key("a"))).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_unreachable_model_server_fails_the_run(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """Nothing listening at the model server URL: state FAILED, not a hang."""
    async with pod(weights["v1"], upstream) as sc:
        summary = final(await prewarm(sc, file_request(text_key("a"))))
        assert summary.state == admin_pb.PREWARM_STATE_FAILED
        assert "did not list its models" in summary.error


@pytest.mark.redis
async def test_unreachable_cache_fails_requests_before_any_upstream_call(
    weights: dict[str, Path], upstream: ModelServerProcess, own_redis: RedisServer
) -> None:
    """With Redis down, lookups stay degraded after the retries: each request fails
    `cache_unavailable` and the model server is never asked (its answer could not be
    stored)."""
    upstream.start("v1")
    async with pod(weights["v1"], upstream, own_redis.url) as sc:
        own_redis.kill()
        summary = final(await prewarm(sc, file_request(text_key("a"), text_key("b"))))
        assert summary.state == admin_pb.PREWARM_STATE_COMPLETED
        assert dict(summary.failed_by_reason) == {"cache_unavailable": 2}
        assert upstream.stats()["completions"] == 0


async def test_failure_budget_stops_the_run(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """With max_failures=2 a run of failing requests stops after the third failure."""
    upstream.start("v1")
    keys = [text_key(f"[[error]] {i}") for i in range(10)]
    async with pod(weights["v1"], upstream) as sc:
        summary = final(await prewarm(sc, file_request(*keys, concurrency=1, max_failures=2)))
        assert summary.state == admin_pb.PREWARM_STATE_FAILURE_BUDGET_EXCEEDED
        assert summary.failed == 3
        assert upstream.stats()["completions"] == 3


async def test_cancelling_the_rpc_stops_upstream_calls(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """A second run is refused while one is going; a client cancelling Prewarm mid-run
    ends the run on the sidecar: the model server receives no further requests, and a
    new run can start."""
    upstream.start("v1", delay_ms=150)
    keys = [text_key(f"question {i}") for i in range(40)]
    async with pod(weights["v1"], upstream) as sc:
        call = sc.admin.Prewarm(file_request(*keys, concurrency=2), metadata=bearer(), timeout=60)
        async for progress in call:
            if progress.done >= 2:
                break
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await prewarm(sc, file_request(text_key("meanwhile")))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "already in progress" in (err.value.details() or "")
        call.cancel()
        await asyncio.sleep(0.5)
        after_cancel = (await asyncio.to_thread(upstream.stats))["completions"]
        await asyncio.sleep(1.0)
        later = (await asyncio.to_thread(upstream.stats))["completions"]
        assert later == after_cancel, "no upstream call after the cancellation"
        assert later < 15
        # The run is over on the sidecar: another one is accepted (and finds the work done).
        summary = final(await prewarm(sc, file_request(*keys[:2])))
        assert dict(summary.skipped_by_reason) == {"already_cached": 2}


async def test_prewarm_needs_a_token_and_a_model_path(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """No bearer token: UNAUTHENTICATED; a sidecar without --model-path: FAILED_PRECONDITION;
    no source: INVALID_ARGUMENT."""
    upstream.start("v1")
    async with pod(weights["v1"], upstream) as sc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await prewarm_unauthenticated(sc)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await prewarm(sc, admin_pb.PrewarmRequest())
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    async with pod(weights["v1"], upstream, model_path="") as sc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await prewarm(sc, file_request(text_key("a")))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "--model-path" in (err.value.details() or "")
    assert upstream.stats()["completions"] == 0


async def test_oversized_prewarm_request_is_refused(
    weights: dict[str, Path], upstream: ModelServerProcess
) -> None:
    """A Prewarm message over INFERCACHE_PREWARM_MAX_MESSAGE_BYTES is RESOURCE_EXHAUSTED,
    and nothing reaches the model server."""
    upstream.start("v1")
    # Each request is its key and the model-server request attached (at most 256 KiB).
    big = [text_key(f"{i} " + "x" * 200_000) for i in range(3)]
    async with pod(weights["v1"], upstream, prewarm_max_message_bytes="1MiB") as sc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await prewarm(sc, file_request(*big))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        summary = final(await prewarm(sc, file_request(big[0])))
        assert summary.stored == 1
    assert upstream.stats()["completions"] == 1


async def prewarm_unauthenticated(sc: Sidecar) -> list[Any]:
    """A Prewarm without authorization metadata."""
    return [p async for p in sc.admin.Prewarm(file_request(text_key("a")), timeout=10)]


async def test_cli_prewarm_from_file(
    weights: dict[str, Path], upstream: ModelServerProcess, tmp_path: Path
) -> None:
    """`infercache prewarm --file` exits 0 and stores the answers; with a failing request
    and the default failure budget of 0 it exits 1 and names the failure."""
    upstream.start("v1")
    good = tmp_path / "good.jsonl"
    text = {"tenant": "acme", "promptVersion": "p1", "sampling": {"temperature": 0}}
    chat = {"role": "user", "content": "hi"}
    good.write_text(
        json.dumps(
            {
                "key": text | {"text": "from the file"},
                "replay": {
                    "path": "/v1/completions",
                    "body": {"model": MODEL, "prompt": "from the file", "temperature": 0},
                },
            }
        )
        + "\n\n"
        + json.dumps(
            {
                "key": {"tenant": "acme", "prompt_version": "p1", "chat": {"messages": [chat]}},
                "replay": {
                    "path": "/v1/chat/completions",
                    "body": {"model": MODEL, "messages": [chat]},
                },
            }
        )
        + "\n"
        # A bare key: nothing to replay, skipped not_replayable.
        + json.dumps(text | {"text": "no request attached"})
        + "\n"
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(
            {
                "key": {"tenant": "acme", "promptVersion": "p1", "text": "[[error]]"},
                "replay": {
                    "path": "/v1/completions",
                    "body": {"model": MODEL, "prompt": "[[error]]"},
                },
            }
        )
    )
    async with pod(weights["v1"], upstream) as sc:
        ok = await asyncio.to_thread(
            run_cli, "prewarm", "--admin", sc.admin_target, "--file", str(good)
        )
        assert ok.returncode == 0, ok.stderr
        assert "prewarm completed: 2 stored, 1 skipped, 0 failed of 3" in ok.stdout
        hit = await sc.client.lookup(text_key("from the file"))
        assert hit.payload.decode() == answer_for("v1", "from the file")

        failing = await asyncio.to_thread(
            run_cli, "prewarm", "--admin", sc.admin_target, "--file", str(bad), "--json"
        )
        assert failing.returncode == 1, failing.stderr
        summary = json.loads(failing.stdout)
        assert summary["failed_by_reason"] == {"upstream_http_500": 1}
        assert summary["items"][0]["reason"] == "upstream_http_500"

        tolerated = await asyncio.to_thread(
            run_cli,
            "prewarm",
            "--admin",
            sc.admin_target,
            "--file",
            str(bad),
            "--max-failures",
            "1",
        )
        assert tolerated.returncode == 0, tolerated.stderr

    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text('{"tenant": "acme"}\n{"tenant": 5, "nope": 1}\n')
    usage = run_cli("prewarm", "--admin", "127.0.0.1:1", "--file", str(malformed))
    assert usage.returncode == 2
    assert "malformed.jsonl:2" in usage.stderr


HOT = {"hot one": 5, "hot two": 3, "lukewarm": 1}
SECRET = "secret question of a private tenant"


def from_version(model_version: str, top_k: int) -> admin_pb.PrewarmRequest:
    """A Prewarm of a version's top-K recorded requests."""
    return admin_pb.PrewarmRequest(
        from_version=admin_pb.PrewarmFromVersion(model_version=model_version, top_k=top_k)
    )


def redis_values(url: str) -> list[bytes]:
    """Every string value and sorted-set member in Redis."""
    r = redis.Redis.from_url(url)
    out: list[bytes] = []
    try:
        for k in r.scan_iter(count=1000):
            kind = r.type(k)
            if kind == b"string":
                out.append(cast(bytes, r.get(k)) or b"")
            elif kind == b"zset":
                out.extend(cast(list[bytes], r.zrange(k, 0, -1)))
    finally:
        r.close()
    return out


@pytest.mark.redis
async def test_from_version_replays_v1_hot_requests_on_v2_weights(
    weights: dict[str, Path],
    upstream: ModelServerProcess,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Traffic on v1 makes requests hot; after the pod switches to v2 weights, prewarm from
    v1's top-2 stores v2's answers for exactly those two; the tenant whose policy forbids
    retention is neither recorded nor replayed, and records are not replayed once a
    tenant's retention is withdrawn."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    # A generous read deadline: on a loaded test machine a 50 ms Redis read can time out,
    # and this test is about which requests are replayed, not about deadlines.
    settings = {"policy_file": str(policy), "lookup_timeout_ms": 2000}
    secret_key = text_key(SECRET, tenant="private")
    upstream.start("v1")
    async with pod(weights["v1"], upstream, redis_server.url, **settings) as v1:
        v1_version = (await v1.client.server_info()).model_version
        filled = final(
            await prewarm(
                v1,
                file_request(*(text_key(t) for t in HOT), secret_key),
            )
        )
        assert filled.stored == 4
        for text, hits in HOT.items():
            for _ in range(hits):
                assert (await v1.client.lookup(text_key(text))).outcome == pb.LOOKUP_OUTCOME_HIT
        for _ in range(10):
            assert (await v1.client.lookup(secret_key)).outcome == pb.LOOKUP_OUTCOME_HIT
        assert v1.running.app.recorder is not None
        await v1.running.app.recorder.merge()

    values = redis_values(redis_server.url)
    assert not any(SECRET.encode() in v for v in values), "never retained"
    # One record holds the request prewarm sent (its body in clear, the key as its wire form).
    assert sum(b"hot one" in v for v in values) == 1

    upstream.start("v2")  # the pod's model server now runs the new weights
    async with pod(weights["v2"], upstream, redis_server.url, **settings) as v2:
        v2_version = (await v2.client.server_info()).model_version
        assert v2_version != v1_version
        summary = final(await prewarm(v2, from_version(v1_version, top_k=2)))
        assert summary.state == admin_pb.PREWARM_STATE_COMPLETED
        assert (summary.total, summary.stored) == (2, 2)
        assert summary.model_version == v2_version
        assert sorted(upstream.stats()["prompts"]) == ["hot one", "hot two"]
        for text in ("hot one", "hot two"):
            hit = await v2.client.lookup(text_key(text))
            assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
            assert hit.payload.decode() == answer_for("v2", text)
            assert hit.payload.decode() != answer_for("v1", text)

        # Asking for more than was recorded replays what there is, never the private tenant,
        # and says so: 3 of the top 10 available (exit 3 unless --allow-fewer).
        top_10 = ("prewarm", "--admin", v2.admin_target, "--from-version", v1_version)
        cli = await asyncio.to_thread(run_cli, *top_10, "--top-k", "10")
        assert cli.returncode == 3, cli.stderr
        assert "1 stored, 2 skipped, 0 failed of 3" in cli.stdout
        assert "of 10 requested: 3 available, 3 replayable, 0 not_replayable" in cli.stdout
        assert "only 3 of the top 10 were replayable" in cli.stderr
        again = await asyncio.to_thread(run_cli, *top_10, "--top-k", "10", "--allow-fewer")
        assert again.returncode == 0, again.stderr
        exactly = final(await prewarm(v2, from_version(v1_version, top_k=3)))
        assert (exactly.requested, exactly.total, exactly.replayable) == (3, 3, 3)
        assert dict(exactly.skipped_by_reason) == {"already_cached": 3}
        # Prewarm's own lookups (2 + 1 misses, then 2 + 3 + 3 hits) are not traffic: the
        # statistics hold only this test's 2 lookups and v2's ranking only their 2 hits.
        app = v2.running.app
        stats = app.cache.stats
        assert stats.total("lookups", version=v2_version, outcome="hit") == 2
        assert stats.total("lookups", version=v2_version, outcome="miss") == 0
        assert app.recorder is not None
        await app.recorder.merge()
        assert [h.hits for h in await app.hits.top(v2_version, 10)] == [1, 1]
        assert sorted(upstream.stats()["prompts"]) == ["hot one", "hot two", "lukewarm"]
        lukewarm = await v2.client.lookup(text_key("lukewarm"))
        assert lukewarm.payload.decode() == answer_for("v2", "lukewarm")
        assert (await v2.client.lookup(secret_key)).outcome == pb.LOOKUP_OUTCOME_MISS

    # Retention withdrawn (no policy file: nobody retains): the records are not replayed.
    async with pod(weights["v2"], upstream, redis_server.url, lookup_timeout_ms=2000) as v2:
        summary = final(await prewarm(v2, from_version(v1_version, top_k=10)))
        assert dict(summary.skipped_by_reason) == {"not_retained": 3}
        assert len(upstream.stats()["prompts"]) == 3
