"""Single flight through the gateway where issue 26 found it stalling or leaking
(items 1 and 3), against real processes: a Redis pause no longer leaves a key held by
nobody for the lease's 60 s, and recomputes (max-age refreshes, hits the gateway cannot
serve) are single-flight and counted as the misses they are. Each test failed before
its fix."""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from tests.support.gateway import MODEL, GatewayPod
from tests.support.processes import RedisServer
from tests.support.sidecars import cli_env, run_cli

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
COMPUTE_S = 0.5
"""What every upstream call takes (the model server's delay)."""

Reply = tuple[int, dict[str, str], bytes]


def chat(prompt: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}


def concurrently(
    pod: GatewayPod, path: str, doc: dict[str, Any], n: int, headers: dict[str, str] | None = None
) -> list[Reply]:
    """`n` identical requests sent at once; their replies."""
    out: list[Reply] = []
    threads = [
        threading.Thread(target=lambda: out.append(pod.post(path, doc, headers)), daemon=True)
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == n
    return out


def counters(pod: GatewayPod) -> dict[str, int]:
    """The sidecar's counters (`infercache stats --json` through its admin plane)."""
    assert pod.sidecar is not None
    done = run_cli("stats", "--admin", pod.sidecar.admin_target, "--json", env=cli_env())
    assert done.returncode == 0, done.stderr
    got: dict[str, int] = json.loads(done.stdout)["counters"]
    return got


def grown(before: dict[str, int], after: dict[str, int], prefix: str) -> int:
    """How much the counters named `prefix...` grew."""
    return sum(v for k, v in after.items() if k.startswith(prefix)) - sum(
        v for k, v in before.items() if k.startswith(prefix)
    )


def test_a_redis_pause_leaves_no_hold_that_nobody_computes(own_redis: RedisServer) -> None:
    """The issue's repro (gateway on Redis, INFERCACHE_GATEWAY_WAIT_MS=5000): Redis is
    SIGSTOPped for 300 ms while a new request R arrives (answered as a miss after `no
    answer within 50 ms`); R again is a hit; `infercache invalidate --tenant acme`; R
    again must be answered within its computation + 1 s. Before, the read-and-hold
    script took R's hold when Redis resumed, nobody computed under it, and the third R
    waited the full 5 s (the key stayed blocked for the lease's 60 s)."""
    assert own_redis.proc is not None
    pod = GatewayPod(
        own_redis.url, delay_ms=int(COMPUTE_S * 1000), gateway_wait_ms=5000, lookup_timeout_ms=50
    )
    try:
        # Traffic first, as on any pod: the read-and-hold connection is open.
        assert pod.post(CHAT, chat(f"warm-up {uuid.uuid4().hex}"))[0] == 200
        doc = chat(f"R {uuid.uuid4().hex}")
        out: list[Reply] = []
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            first = threading.Thread(target=lambda: out.append(pod.post(CHAT, doc)), daemon=True)
            first.start()
            time.sleep(0.3)
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        first.join(30)
        assert (out[0][0], out[0][1]["x-infercache-cache"]) == (200, "miss")
        assert pod.sidecar is not None
        assert "no answer within 50 ms" in pod.sidecar.stderr()
        # The store follows the response: R is a hit once it landed.
        deadline = time.monotonic() + 5
        while pod.post(CHAT, doc)[1]["x-infercache-cache"] != "hit":
            assert time.monotonic() < deadline, "R never became a hit"
            time.sleep(0.1)
        done = run_cli(
            "invalidate",
            "--admin",
            pod.sidecar.admin_target,
            "--tenant",
            "acme",
            "--reason",
            "issue 26 repro",
            env=cli_env(),
        )
        assert done.returncode == 0, done.stderr
        started = time.monotonic()
        status, headers, _ = pod.post(CHAT, doc)
        took = time.monotonic() - started
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        assert took < COMPUTE_S + 1.0, took
    finally:
        pod.stop()


def test_max_age_refreshes_are_single_flight(redis_server: RedisServer) -> None:
    """Three concurrent identical requests whose max-age the stored answer exceeds: one
    upstream call, the other two get its answer (before: three calls, each waiter handed
    the old entry, refused it for its age and computed on its own)."""
    pod = GatewayPod(redis_server.url, delay_ms=int(COMPUTE_S * 1000))
    try:
        doc = chat(f"refresh {uuid.uuid4().hex}")
        assert pod.post(CHAT, doc)[1]["x-infercache-cache"] == "miss"
        time.sleep(2.2)  # the stored answer is now older than max-age=1
        before = pod.upstream_calls()
        replies = concurrently(pod, CHAT, doc, 3, {"cache-control": "max-age=1"})
        assert [r[0] for r in replies] == [200, 200, 200]
        assert pod.upstream_calls() == before + 1
        outcomes = sorted(r[1]["x-infercache-cache"] for r in replies)
        assert outcomes == ["hit", "hit", "miss"]
        assert all(
            int(r[1].get("age", "0")) <= 1 for r in replies if r[1]["x-infercache-cache"] == "hit"
        )
    finally:
        pod.stop()


def test_hits_the_gateway_cannot_serve_are_single_flight_misses(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A chat answer stored as a stream without usage cannot answer a request that does
    not stream (a whole answer needs its usage). Three such concurrent requests: one
    upstream call, the other two get its answer (before: three calls). And such an entry
    counts as the miss it is, not as a hit: in the lookup counters, the saved tokens and
    latency, and the prewarm ranking (hit_records)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    pod = GatewayPod(redis_server.url, delay_ms=int(COMPUTE_S * 1000), policy_file=str(policy))
    try:
        doc = chat(f"streamed first {uuid.uuid4().hex}")
        assert pod.post(CHAT, doc | {"stream": True})[1]["x-infercache-cache"] == "miss"
        before, calls = counters(pod), pod.upstream_calls()
        replies = concurrently(pod, CHAT, doc, 3)
        assert [r[0] for r in replies] == [200, 200, 200]
        assert pod.upstream_calls() == calls + 1
        assert sorted(r[1]["x-infercache-cache"] for r in replies) == ["hit", "hit", "miss"]
        assert len({json.loads(r[2])["choices"][0]["message"]["content"] for r in replies}) == 1
        after = counters(pod)
        # The two waiters' answers are hits; the unservable entry was a miss.
        assert grown(before, after, "lookups.hit") == 2
        assert grown(before, after, "lookups.miss") == 1

        # One at a time: an unservable entry adds a miss and nothing a hit would.
        doc = chat(f"alone {uuid.uuid4().hex}")
        assert pod.post(CHAT, doc | {"stream": True})[1]["x-infercache-cache"] == "miss"
        before = counters(pod)
        assert pod.post(CHAT, doc)[1]["x-infercache-cache"] == "miss"
        after = counters(pod)
        assert grown(before, after, "lookups.hit") == 0
        assert grown(before, after, "lookups.miss") == 1
        assert grown(before, after, "saved_tokens") == 0
        assert grown(before, after, "saved_latency_ms") == 0
        # Its recomputed answer is a real hit, counted everywhere (the counters can move).
        status, headers, _ = pod.post(CHAT, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "hit")
        hit = counters(pod)
        assert grown(after, hit, "lookups.hit") == 1
        assert grown(after, hit, "saved_tokens") > 0
        # The prewarm ranking counts that one hit, not the unservable entry (merged into
        # Redis at the latest when the sidecar stops).
        assert pod.sidecar is not None
        pod.sidecar.stop()
        scores = ranking(redis_server, headers["x-infercache-model-version"])
        assert scores.get(headers["x-infercache-key"]) == 1, scores
    finally:
        pod.stop()


def ranking(redis_server: RedisServer, model_version: str) -> dict[str, float]:
    """The prewarm ranking of `model_version` in Redis: hits by key digest (its first 16
    hex digits, as x-infercache-key shows it)."""
    h = hashlib.sha256(model_version.encode()).hexdigest()[:16]
    client = redis.Redis(port=redis_server.port)
    try:
        found = cast(
            list[tuple[bytes, float]],
            client.zrange(f"ic:v2:{{hits:{h}}}:rank", 0, -1, withscores=True),
        )
    finally:
        client.close()
    return {member.decode()[:16]: score for member, score in found}
