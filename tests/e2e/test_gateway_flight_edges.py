"""Single flight and prewarm where a third review (2026-12-02) found them wrong, against
real processes: requests that will not store no longer hold identical ones back, a
request past the cap on waiters is computed instead of refused, and prewarm stores what
the gateway would (a body naming an alias of the served model, a generation longer
than the lease TTL). Each test failed before its fix."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import MODEL, GatewayPod
from tests.support.processes import RedisServer
from tests.support.sidecars import run_cli

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
SLOW_S = 4.0


def chat(prompt: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}


def in_background(
    pod: GatewayPod, doc: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[threading.Thread, list[tuple[int, dict[str, str], bytes]]]:
    out: list[tuple[int, dict[str, str], bytes]] = []
    t = threading.Thread(target=lambda: out.append(pod.post(CHAT, doc, headers)), daemon=True)
    t.start()
    return t, out


def upstream_calls_reach(pod: GatewayPod, n: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if pod.upstream_calls() >= n:
            return True
        time.sleep(0.05)
    return False


def test_requests_that_will_not_store_do_not_hold_identical_ones_back() -> None:
    """read-only (and no-store) requests: the second identical one reaches the model
    server while the first is still computing (before, it waited for an answer the
    first never stores, then computed: a burst was served one after another)."""
    pod = GatewayPod(slow_s=SLOW_S)
    try:
        for headers in ({"x-infercache-cache-mode": "read-only"}, {"cache-control": "no-store"}):
            doc = chat(f"[[slow]] flight {uuid.uuid4().hex}")
            before = pod.upstream_calls()
            first, got1 = in_background(pod, doc, headers)
            assert upstream_calls_reach(pod, before + 1, SLOW_S)
            second, got2 = in_background(pod, doc, headers)
            # Well before the first ends: the second is not waiting behind its hold.
            assert upstream_calls_reach(pod, before + 2, SLOW_S / 2), headers
            first.join(30)
            second.join(30)
            assert [g[0][0] for g in (got1, got2)] == [200, 200]
            assert [g[0][1]["x-infercache-cache"] for g in (got1, got2)] == ["miss", "miss"]
    finally:
        pod.stop()


def test_a_request_past_the_cap_on_waiters_is_computed_not_refused() -> None:
    """INFERCACHE_LEASE_MAX_WAITERS=1: the first computes, the second waits for it (a
    hit), the third cannot wait and is computed (before: a 429 with nothing sent)."""
    pod = GatewayPod(slow_s=SLOW_S, lease_max_waiters=1)
    try:
        doc = chat(f"[[slow]] cap {uuid.uuid4().hex}")
        before = pod.upstream_calls()
        first, got1 = in_background(pod, doc)
        assert upstream_calls_reach(pod, before + 1, SLOW_S)
        second, got2 = in_background(pod, doc)
        time.sleep(0.5)  # parked on the first's hold
        status, headers, _ = pod.post(CHAT, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        first.join(30)
        second.join(30)
        assert (got1[0][0], got1[0][1]["x-infercache-cache"]) == (200, "miss")
        assert (got2[0][0], got2[0][1]["x-infercache-cache"]) == (200, "hit")
        assert pod.upstream_calls() == before + 2
    finally:
        pod.stop()


def test_prewarm_stores_an_alias_body_whose_generation_outlasts_the_lease(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The model server serves `tiny` as `alias` too (vLLM --served-model-name tiny
    alias) and takes 3 s per answer; leases last 2 s. The gateway stores an answer to a
    body naming `alias` (the lease was valid when the call began). Prewarm replays that
    body on v2 and must store v2's answer under the same rules: before, it refused the
    answer as naming another model than INFERCACHE_MODEL_SERVER_MODEL (wrong_model),
    and judged the lease at the end of the call (store_refused)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    pod = GatewayPod(
        redis_server.url,
        policy_file=str(policy),
        model_server_model=MODEL,
        lookup_timeout_ms=2000,
        lease_ttl_s=2,
    )
    try:
        pod.upstream.stop()
        pod.upstream.start("v1", models=(MODEL, "alias"), delay_ms=3000)
        doc = {"model": "alias", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        status, headers, _ = pod.post(CHAT, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        # The store follows the response; the hold it would find has expired (2 s < 3 s),
        # so an ask at once could find neither and compute again.
        time.sleep(1.0)
        assert pod.post(CHAT, doc)[1]["x-infercache-cache"] == "hit"
        v1 = headers["x-infercache-model-version"]
        admin = pod.switch_to("v2", models=(MODEL, "alias"), delay_ms=3000)
        done = run_cli("prewarm", "--admin", admin, "--from-version", v1, "--top-k", "1")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 stored, 0 skipped, 0 failed of 1" in done.stdout, done.stdout
        status, headers, raw = pod.post(CHAT, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "hit")
        assert b"[v2] answer" in raw
    finally:
        pod.stop()


def test_a_request_cut_by_shutdown_gives_its_hold_back(redis_server: RedisServer) -> None:
    """SIGTERM while a miss computes past the grace period (1 s here): uvicorn cancels it
    and did not wait, so its hold stayed in Redis for the lease's 60 s and the same
    request on the next pod waited out INFERCACHE_GATEWAY_WAIT_MS first. Now the stop
    waits for that cleanup: the next pod computes at once."""
    pod = GatewayPod(redis_server.url, slow_s=SLOW_S, gateway_wait_ms=20000)
    try:
        doc = chat(f"[[slow]] shutdown {uuid.uuid4().hex}")
        before = pod.upstream_calls()
        cut, _ = in_background(pod, doc)
        assert upstream_calls_reach(pod, before + 1, SLOW_S)
        assert pod.sidecar is not None
        pod.sidecar.stop()  # SIGTERM mid-generation; grace 1 s < SLOW_S
        cut.join(30)
        pod.start()
        started = time.monotonic()
        status, headers, _ = pod.post(CHAT, doc)
        took = time.monotonic() - started
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        # SLOW_S to compute; with the hold left behind it was 20 s of waiting first.
        assert took < SLOW_S + 8, took
    finally:
        pod.stop()
