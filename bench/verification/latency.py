"""A hit's latency through the real gateway with verification on (1%) and off: two pods
(sidecar process + stand-in model server process each), their hits interleaved one by
one over kept-alive connections, so both see the same machine load."""

from __future__ import annotations

import http.client
import json
import statistics
import time
import uuid

from tests.support.gateway import API_KEYS, MODEL, GatewayPod

CHAT = "/v1/chat/completions"


def _post(conn: http.client.HTTPConnection, prompt: str) -> tuple[float, str]:
    body = json.dumps(
        {"model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": prompt}]}
    )
    headers = {"content-type": "application/json", "authorization": f"Bearer {API_KEYS['acme']}"}
    t0 = time.perf_counter()
    conn.request("POST", CHAT, body, headers)
    resp = conn.getresponse()
    resp.read()
    elapsed = time.perf_counter() - t0
    return elapsed, resp.getheader("x-infercache-cache") or ""


def hit_p50s(prompts: int, rounds: int) -> tuple[float, float, int]:
    """(p50 with, p50 without, shadow calls the verifying pod's model server got)."""
    on = GatewayPod(verify_rate="0.01", verify_baseline_rate="0.01")
    off = GatewayPod(verify_rate="0", verify_baseline_rate="0")
    try:
        texts = [f"bench {uuid.uuid4().hex}" for _ in range(prompts)]
        conns = [http.client.HTTPConnection("127.0.0.1", p.port, timeout=30) for p in (on, off)]
        for conn in conns:
            for t in texts:
                _post(conn, t)
        before = on.upstream_calls()
        times: tuple[list[float], list[float]] = ([], [])
        for r in range(rounds):
            for t in texts:
                # Alternate which pod goes first, so neither always follows the other.
                order = (0, 1) if r % 2 == 0 else (1, 0)
                for k in order:
                    elapsed, outcome = _post(conns[k], t)
                    assert outcome == "hit", outcome
                    times[k].append(elapsed)
        time.sleep(0.5)  # the last shadow calls land
        shadow = on.upstream_calls() - before
        return statistics.median(times[0]), statistics.median(times[1]), shadow
    finally:
        on.stop()
        off.stop()
