"""Prewarm from what the gateway really sent (issue 16 item 5): v1 traffic through the
gateway, the pod switched to v2 weights, prewarm from v1's ranking replays the recorded
upstream bodies byte for byte and stores v2's answers to exactly those bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import MODEL, gateway_pod_retaining
from tests.support.model_server import answer_for, chat_prompt, embedding_for
from tests.support.processes import RedisServer
from tests.support.sidecars import run_cli

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
QUESTION = "How do I reset my password?"
# Answers that depend on a system prompt and on tools, beside a plain one; hit counts
# decide the ranking.
BODIES: dict[str, dict[str, Any]] = {
    "plain": {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}]},
    "system": {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Answer as a pirate."},
            {"role": "user", "content": QUESTION},
        ],
    },
    "tools": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [TOOL],
    },
}
HITS = {"plain": 4, "system": 3, "tools": 2}


def _content(raw: bytes) -> str:
    return str(json.loads(raw)["choices"][0]["message"]["content"])


def test_prewarm_from_v1_ranking_stores_v2_answers_to_the_recorded_bodies(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The hot bodies of v1 (counted in memory, merged when the v1 sidecar stops) are sent
    to the v2 model server exactly as the gateway sent them to v1's; afterwards each is a
    hit carrying v2's answer to that body, never v1's, and the CLI reports 3 of the top 3
    replayable (exit 0)."""
    pod = gateway_pod_retaining(redis_server.url, tmp_path, prewarm_payload="openai_json")
    try:
        for name, doc in BODIES.items():
            status, headers, raw = pod.post(CHAT, doc)
            assert (status, headers["x-infercache-cache"]) == (200, "miss"), raw
            for _ in range(HITS[name]):
                assert pod.post(CHAT, doc)[1]["x-infercache-cache"] == "hit"
        v1 = headers["x-infercache-model-version"]
        sent_to_v1 = sorted(pod.upstream.stats()["bodies"])
        assert len(sent_to_v1) == 3

        assert pod.sidecar is not None
        pod.sidecar.stop()  # SIGTERM: the last hit counts are merged into Redis
        pod.upstream.start("v2")  # the model server now runs the new weights
        pod.settings["model_path"] = str(pod.swap_weights())
        pod.start()
        admin = pod.sidecar.admin_target
        done = run_cli("prewarm", "--admin", admin, "--from-version", v1, "--top-k", "3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "3 stored, 0 skipped, 0 failed of 3" in done.stdout
        assert sorted(pod.upstream.stats()["bodies"]) == sent_to_v1  # byte for byte

        calls = pod.upstream_calls()
        for doc in BODIES.values():
            status, headers, raw = pod.post(CHAT, doc)
            assert (status, headers["x-infercache-cache"]) == (200, "hit"), raw
            assert headers["x-infercache-model-version"] != v1
            prompt = chat_prompt(doc["messages"])
            assert _content(raw) == answer_for("v2", prompt)
            assert _content(raw) != answer_for("v1", prompt)
        assert pod.upstream_calls() == calls
    finally:
        pod.stop()


def test_embeddings_traffic_is_recorded_and_prewarmed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """An embeddings request is ranked like any other, so it is recorded too (before
    2026-12-02 it was ranked but never recorded: a top-k slot reported not_replayable and
    the CLI exited 3); prewarm stores v2's vector for the body, then it is a hit."""
    pod = gateway_pod_retaining(redis_server.url, tmp_path, prewarm_payload="openai_json")
    path, doc = "/v1/embeddings", {"model": MODEL, "input": "embed me for prewarm"}
    try:
        status, headers, _ = pod.post(path, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "miss")
        assert pod.post(path, doc)[1]["x-infercache-cache"] == "hit"
        v1 = headers["x-infercache-model-version"]
        admin = pod.switch_to("v2")
        done = run_cli("prewarm", "--admin", admin, "--from-version", v1, "--top-k", "1")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 stored, 0 skipped, 0 failed of 1" in done.stdout, done.stdout
        calls = pod.upstream_calls()
        status, headers, raw = pod.post(path, doc)
        assert (status, headers["x-infercache-cache"]) == (200, "hit")
        assert pod.upstream_calls() == calls
        up = json.loads(raw)["data"][0]["embedding"]
        assert up == embedding_for("v2", "embed me for prewarm")
    finally:
        pod.stop()
