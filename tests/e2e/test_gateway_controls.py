"""Gateway cache controls and fleet behaviour: Cache-Control, cache modes, per-tenant
policy defaults and bypass rules, single flight, a trusted tenant header, the keys file
reload, and weights changed under the pod."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.checkpoints import lora_tensors, write_adapter
from tests.support.gateway import API_KEYS, MODEL, GatewayPod, write_keys
from tests.support.processes import RedisServer

pytestmark = pytest.mark.e2e

POLICY = """\
defaults:
  bypass: {tools: true}
tenants:
  globex: {gateway_cache_mode: read-only}
"""


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayPod]:
    """A gateway pod with a policy: tools bypass, globex read-only by default."""
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    p = GatewayPod(policy_file=str(policy))
    yield p
    p.stop()


def unique(text: str = "ctl") -> str:
    return f"{text} {uuid.uuid4().hex}"


def body(prompt: str, **kw: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
    } | kw


def outcomes(
    pod: GatewayPod, doc: dict[str, Any], *headers: dict[str, str], tenant: str = "acme"
) -> list[str]:
    """x-infercache-cache of one request per header set, in order."""
    out = []
    for h in headers:
        status, got, raw = pod.post("/v1/chat/completions", doc, h, tenant=tenant)
        assert status == 200, raw
        out.append(got["x-infercache-cache"])
    return out


def test_no_cache_refreshes_and_stores(pod: GatewayPod) -> None:
    """Cache-Control: no-cache skips the lookup, calls upstream, and stores the answer."""
    doc = body(unique())
    before = pod.upstream_calls()
    got = outcomes(pod, doc, {}, {"cache-control": "no-cache"}, {})
    assert got == ["miss", "refresh", "hit"]
    assert pod.upstream_calls() == before + 2


def test_no_store_is_looked_up_but_not_stored(pod: GatewayPod) -> None:
    """Cache-Control: no-store on a miss stores nothing; the next request misses again."""
    doc = body(unique())
    before = pod.upstream_calls()
    got = outcomes(pod, doc, {"cache-control": "no-store"}, {}, {"cache-control": "no-store"})
    assert got == ["miss", "miss", "hit"]
    assert pod.upstream_calls() == before + 2


def test_max_age(pod: GatewayPod) -> None:
    """max-age=N serves entries at most N seconds old; max-age=0 is a refresh."""
    doc = body(unique())
    outcomes(pod, doc, {})
    time.sleep(1.1)
    got = outcomes(pod, doc, {"cache-control": "max-age=3600"}, {"cache-control": "max-age=0"})
    assert got == ["hit", "refresh"]
    status, _, raw = pod.post("/v1/chat/completions", doc, {"cache-control": "max-age=soon"})
    assert status == 400, raw


@pytest.mark.parametrize(
    ("mode", "expected", "upstream"),
    [
        ("read-only", ["miss", "miss", "miss"], 3),
        ("write-only", ["refresh", "refresh", "hit"], 2),
        ("off", ["bypass", "bypass", "miss"], 3),
    ],
)
def test_cache_modes(pod: GatewayPod, mode: str, expected: list[str], upstream: int) -> None:
    """read-only never stores, write-only never reads but stores, off does neither (the
    third request is read-write)."""
    doc = body(unique(mode))
    before = pod.upstream_calls()
    h = {"x-infercache-cache-mode": mode}
    assert outcomes(pod, doc, h, h, {}) == expected
    assert pod.upstream_calls() == before + upstream


def test_unknown_mode_is_400(pod: GatewayPod) -> None:
    """A cache mode that does not exist is refused, naming the header."""
    status, _, raw = pod.post(
        "/v1/chat/completions", body(unique()), {"x-infercache-cache-mode": "sometimes"}
    )
    assert status == 400
    assert b"x-infercache-cache-mode" in raw


def test_tenant_default_mode_from_policy(pod: GatewayPod) -> None:
    """globex's policy default is read-only: its misses are never stored, unless a request
    asks for read-write."""
    doc = body(unique())
    assert outcomes(pod, doc, {}, {}, tenant="globex") == ["miss", "miss"]
    rw = {"x-infercache-cache-mode": "read-write"}
    assert outcomes(pod, doc, rw, rw, tenant="globex") == ["miss", "hit"]


def test_policy_bypass_rule_applies(pod: GatewayPod) -> None:
    """The policy bypasses requests with tools: forwarded, marked bypass, never stored."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    doc = body(unique(), tools=tools)
    before = pod.upstream_calls()
    status, headers, _ = pod.post("/v1/chat/completions", doc)
    assert status == 200
    assert headers["x-infercache-cache"] == "bypass"
    assert headers["x-infercache-bypass-reason"] == "tools"
    assert outcomes(pod, doc, {}) == ["bypass"]
    assert pod.upstream_calls() == before + 2


def test_prompt_version_header_keeps_apart(pod: GatewayPod) -> None:
    """Two prompt versions of one body are two entries."""
    doc = body(unique())
    v1, v2 = {"x-infercache-prompt-version": "v1"}, {"x-infercache-prompt-version": "v2"}
    assert outcomes(pod, doc, v1, v2, v1) == ["miss", "miss", "hit"]


def test_keys_file_is_reloaded(pod: GatewayPod, tmp_path: Path) -> None:
    """A key added to the keys file works once the file is re-read; a removed one is 401."""
    doc = body(unique())
    new_key = "sk-initech-0123456789abcdef"
    keys = {"acme": API_KEYS["acme"], "initech": new_key}
    write_keys(pod.keys_file, keys)
    deadline = time.monotonic() + 15
    while True:
        status, _, _ = pod.post(
            "/v1/chat/completions", doc, {"authorization": f"Bearer {new_key}"}, tenant=""
        )
        if status == 200:
            break
        assert status == 401
        assert time.monotonic() < deadline, "the keys file was not re-read"
        time.sleep(0.2)
    status, _, _ = pod.post("/v1/chat/completions", doc, tenant="globex")
    assert status == 401  # globex's key is gone
    write_keys(pod.keys_file)
    deadline = time.monotonic() + 15
    while pod.post("/v1/chat/completions", doc, tenant="globex")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_single_flight_one_upstream_call(tmp_path: Path) -> None:
    """N concurrent identical requests make one upstream call; all get its answer."""
    pod = GatewayPod(delay_ms=1500)
    try:
        prompt = unique("flight")

        async def one(c: openai.AsyncOpenAI) -> tuple[str, str]:
            raw = await c.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0
            )
            return raw.headers["x-infercache-cache"], raw.parse().choices[0].message.content or ""

        async def many() -> list[tuple[str, str]]:
            async with openai.AsyncOpenAI(
                base_url=pod.base_url, api_key=API_KEYS["acme"], max_retries=0
            ) as c:
                return await asyncio.gather(*(one(c) for _ in range(8)))

        before = pod.upstream_calls()
        results = asyncio.run(many())
        assert pod.upstream_calls() == before + 1
        assert len({text for _, text in results}) == 1
        assert sorted(o for o, _ in results) == ["hit"] * 7 + ["miss"]
    finally:
        pod.stop()


def test_trusted_tenant_header_alone_names_the_tenant_without_a_keys_file() -> None:
    """With INFERCACHE_GATEWAY_TENANT_HEADER set and no keys file, the front proxy
    authenticates: that header names the tenant, and a request without it is 401."""
    pod = GatewayPod(gateway_tenant_header="x-tenant", gateway_keys_file="")
    try:
        doc = body(unique())
        a = pod.post("/v1/chat/completions", doc, {"x-tenant": "team-a"}, tenant="")
        b = pod.post("/v1/chat/completions", doc, {"x-tenant": "team-b"}, tenant="")
        a2 = pod.post("/v1/chat/completions", doc, {"x-tenant": "team-a"}, tenant="")
        assert [r[0] for r in (a, b, a2)] == [200, 200, 200]
        assert [r[1]["x-infercache-cache"] for r in (a, b, a2)] == ["miss", "miss", "hit"]
        status, headers, raw = pod.post("/v1/chat/completions", doc, tenant="")
        assert status == 401, raw
        assert headers["www-authenticate"] == "Bearer"
        assert "x-tenant" in json.loads(raw)["error"]["message"]
    finally:
        pod.stop()


def test_with_a_keys_file_the_tenant_header_cannot_replace_the_key() -> None:
    """With a keys file and a trusted tenant header, a request without a key or with an
    unknown key is 401 whatever the header names (it was served on the header alone),
    a header naming another tenant than the key's is 403, and a matching one is served."""
    pod = GatewayPod(gateway_tenant_header="x-tenant")
    try:
        doc = body(unique())
        unknown = {"authorization": "Bearer sk-nobody-0123456789abcdef"}
        for headers in ({"x-tenant": "acme"}, unknown | {"x-tenant": "acme"}):
            status, answer, raw = pod.post("/v1/chat/completions", doc, headers, tenant="")
            assert status == 401, raw
            assert answer["www-authenticate"] == "Bearer"
            assert json.loads(raw)["error"]["code"] == "invalid_api_key"
        status, _, raw = pod.post("/v1/chat/completions", doc, {"x-tenant": "globex"})
        assert status == 403, raw
        assert json.loads(raw)["error"] | {"message": ""} == {
            "message": "",
            "type": "permission_error",
            "param": "x-tenant",
            "code": "tenant_mismatch",
        }
        assert pod.upstream_calls() == 0
        served = [
            pod.post("/v1/chat/completions", doc, {"x-tenant": "acme"}),
            pod.post("/v1/chat/completions", doc),
        ]
        assert [(r[0], r[1]["x-infercache-cache"]) for r in served] == [(200, "miss"), (200, "hit")]
    finally:
        pod.stop()


@pytest.mark.redis
def test_weights_changed_under_the_pod_miss(redis_server: RedisServer) -> None:
    """A sidecar restarted on other weights (same Redis, same body) misses; restarted on
    the same weights it hits."""
    pod = GatewayPod(redis_server.url)
    try:
        doc = body(unique("weights"))
        assert outcomes(pod, doc, {}, {}) == ["miss", "hit"]
        first_fp = pod.post("/v1/chat/completions", doc)[1]["x-infercache-model-version"]
        pod.sidecar.stop()  # type: ignore[union-attr]
        pod.start()
        assert outcomes(pod, doc, {}) == ["hit"]  # same weights, from Redis
        pod.sidecar.stop()  # type: ignore[union-attr]
        pod.settings["model_path"] = str(pod.swap_weights())
        pod.start()
        status, headers, _ = pod.post("/v1/chat/completions", doc)
        assert status == 200
        assert headers["x-infercache-model-version"] != first_fp
        assert headers["x-infercache-cache"] == "miss"
    finally:
        pod.stop()


@pytest.mark.redis
def test_sigterm_drains_in_flight_requests_and_their_stores(redis_server: RedisServer) -> None:
    """SIGTERM while a miss waits on the model server: the client gets the whole answer,
    it is stored before the sidecar exits (a restarted one hits), and the exit is clean."""
    pod = GatewayPod(redis_server.url, delay_ms=2000, grace_period_s="15")
    try:
        doc = body(unique("drain"))
        before = pod.upstream_calls()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(pod.post, "/v1/chat/completions", doc)
            deadline = time.monotonic() + 30
            while pod.upstream_calls() == before:  # the request reached the model server
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert pod.sidecar is not None
            pod.sidecar.proc.terminate()
            status, headers, raw = pending.result(timeout=60)
        assert status == 200
        assert headers["x-infercache-cache"] == "miss"
        assert json.loads(raw)["choices"][0]["message"]["content"].startswith("[v1] answer")
        assert pod.sidecar.proc.wait(timeout=30) == 0
        pod.sidecar.stop()  # closes its log
        pod.start()
        assert outcomes(pod, doc, {}) == ["hit"]
    finally:
        pod.stop()


@pytest.mark.redis
def test_a_model_naming_a_served_adapter_misses_when_the_adapters_files_change(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """`model` names a LoRA adapter the pod serves: its fingerprint is in the key, so new
    adapter files under the same name are a MISS; the base model's entries stay hits."""
    first = write_adapter(tmp_path / "lora-1", lora_tensors(layers=1, seed=1))
    second = write_adapter(tmp_path / "lora-2", lora_tensors(layers=1, seed=2))
    pod = GatewayPod(redis_server.url, adapters=f"my-lora={first}")
    try:
        pod.upstream.stop()
        pod.upstream.start("v1", models=("tiny", "my-lora"))
        lora = body(unique("adapter")) | {"model": "my-lora"}
        base = body(unique("adapter base"))
        assert outcomes(pod, lora, {}) == ["miss"]
        assert outcomes(pod, lora, {}) == ["hit"]
        assert outcomes(pod, base, {}) == ["miss"]
        assert pod.sidecar is not None
        pod.sidecar.stop()
        pod.settings["adapters"] = f"my-lora={second}"
        pod.start()
        assert outcomes(pod, base, {}) == ["hit"]  # same base weights, from Redis
        assert outcomes(pod, lora, {}) == ["miss"]  # other adapter weights
        assert outcomes(pod, lora, {}) == ["hit"]
    finally:
        pod.stop()
