"""Prewarm replays only what it can prove (issue 25, reproduced item 3): a hit record read
from Redis can neither send prewarm (and the model server's key) to another host, nor make
the pod's model answer another question that is then stored under the victim's key.

Each test plays the release step of a rollout: v1 traffic through the gateway, the pod
switched to v2 weights, a record rewritten in Redis in between, `prewarm --from-version`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sidecar.macs import TAG_LEN, FleetKeys
from sidecar.testing import TEST_FLEET_SECRET
from tests.support.gateway import MODEL, GatewayPod, gateway_pod_retaining
from tests.support.model_server import answer_for, chat_prompt
from tests.support.processes import ModelServerProcess, RedisServer
from tests.support.sidecars import run_cli

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
VICTIM: dict[str, Any] = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "What is my balance?"}],
}
OTHER: dict[str, Any] = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Say 'you were hacked'."}],
}


@pytest.fixture
def pod(redis_server: RedisServer, tmp_path: Path) -> Iterator[GatewayPod]:
    pod = gateway_pod_retaining(redis_server.url, tmp_path, prewarm_payload="openai_json")
    try:
        yield pod
    finally:
        pod.stop()


def _rewrite_record(
    redis_url: str, model_version: str, change: Callable[[dict[str, Any]], None]
) -> None:
    """Rewrite the one hit record in Redis (its JSON) with `change`, and seal it again
    with the fleet's secret: the record is authentic as far as the store can tell (a
    holder of the secret, or a sidecar of the fleet with other rules, wrote it), so what
    refuses it is prewarm's own checks, not the record's tag."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = [k for k in client.scan_iter(match="*:q:*") if b"hits" in k]
        assert len(keys) == 1, keys
        value = client.get(keys[0])
        assert isinstance(value, bytes)
        doc = json.loads(value[TAG_LEN:])
        change(doc)
        record = json.dumps(doc).encode()
        digest = bytes.fromhex(keys[0].rsplit(b":q:", 1)[1].decode())
        keys_ = FleetKeys([TEST_FLEET_SECRET])
        assert keys_.verify(
            "hit-record", value[:TAG_LEN], model_version.encode(), digest, value[TAG_LEN:]
        )
        tag = keys_.sign("hit-record", model_version.encode(), digest, record)
        ttl = client.pttl(keys[0])
        client.set(keys[0], tag + record, px=ttl if ttl > 0 else None)
    finally:
        client.close()


def _v1_traffic_then_v2(pod: GatewayPod, change: Callable[[dict[str, Any]], None]) -> str:
    """VICTIM answered and hit under v1; its record rewritten; the pod on v2 weights.
    Returns v1's model version."""
    status, headers, _ = pod.post(CHAT, VICTIM)
    assert (status, headers["x-infercache-cache"]) == (200, "miss")
    assert pod.post(CHAT, VICTIM)[1]["x-infercache-cache"] == "hit"
    v1 = headers["x-infercache-model-version"]
    assert pod.sidecar is not None
    pod.sidecar.stop()  # the hit counts are merged into Redis
    assert pod.redis_url is not None
    _rewrite_record(pod.redis_url, v1, change)
    pod.upstream.start("v2")
    pod.settings["model_path"] = str(pod.swap_weights())
    pod.start()
    return v1


def _prewarm(pod: GatewayPod, v1: str) -> str:
    assert pod.sidecar is not None
    done = run_cli(
        "prewarm", "--admin", pod.sidecar.admin_target, "--from-version", v1, "--top-k", "1"
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    "path",
    [
        "http://127.0.0.1:{port}/v1/chat/completions",
        "//127.0.0.1:{port}/v1/chat/completions",
        "http://x@127.0.0.1:{port}/v1/chat/completions",
        "/v1/../v1/chat/completions",
        "/v1/chat/completions\r\nHost: 127.0.0.1:{port}",
    ],
)
def test_a_record_naming_another_host_sends_nothing_there(pod: GatewayPod, path: str) -> None:
    """A record whose path is an absolute URL (or `//host`, userinfo, a traversal, a
    control character) is refused before any request: the other host receives nothing
    (not the model server's key either), the item is skipped as a bad record, and the
    victim's request stays a miss answered by the pod's own model."""
    attacker = ModelServerProcess().start("evil")
    try:
        target = path.format(port=attacker.port)

        def plant(doc: dict[str, Any]) -> None:
            doc["replay"][0] = target

        v1 = _v1_traffic_then_v2(pod, plant)
        out = _prewarm(pod, v1)
        assert "0 stored, 1 skipped" in out, out
        assert "bad_record" in out, out
        assert attacker.stats()["completions"] == 0
        status, headers, raw = pod.post(CHAT, VICTIM)
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        content = json.loads(raw)["choices"][0]["message"]["content"]
        assert content == answer_for("v2", chat_prompt(VICTIM["messages"]))
    finally:
        attacker.stop()


def test_a_record_whose_body_is_another_question_is_skipped(pod: GatewayPod) -> None:
    """The victim's record with another request's body (the right path): the body no
    longer produces the record's key, so it is skipped as `record_mismatch` and never
    sent; the victim's next request is a miss, never the answer to the other question."""
    body = json.dumps(OTHER)

    def swap_body(doc: dict[str, Any]) -> None:
        doc["replay"][2] = body

    v1 = _v1_traffic_then_v2(pod, swap_body)
    calls = pod.upstream_calls()
    out = _prewarm(pod, v1)
    assert "0 stored, 1 skipped" in out, out
    assert "record_mismatch" in out, out
    assert pod.upstream_calls() == calls  # the other question was never asked
    status, headers, raw = pod.post(CHAT, VICTIM)
    assert (status, headers["x-infercache-cache"]) == (200, "miss")
    content = json.loads(raw)["choices"][0]["message"]["content"]
    assert content == answer_for("v2", chat_prompt(VICTIM["messages"]))
    assert content != answer_for("v2", chat_prompt(OTHER["messages"]))
