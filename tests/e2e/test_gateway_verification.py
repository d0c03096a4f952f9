"""Shadow verification through real processes: a gateway pod (sidecar + the stand-in
model server over HTTP) whose model server changes behaviour under the same weights,
or answers with natural nondeterminism, or is slow (docs/verification.md)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.gateway import MODEL, GatewayPod
from tests.support.sidecars import admin_invalidate, run_cli

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
FAST: dict[str, Any] = {
    # Every miss computed twice and half the hits checked: the test's minutes, not hours.
    "verify_baseline_rate": "1.0",
    "verify_rate": "0.5",
    "verify_false_alarm": "0.0001",
}


def body(prompt: str, **fields: Any) -> dict[str, Any]:
    """A reproducible (temperature 0) chat request."""
    doc = {"model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": prompt}]}
    return doc | fields


def served(pod: GatewayPod, prompt: str, tenant: str = "acme") -> tuple[str, str]:
    """(x-infercache, bypass reason) of one request."""
    status, headers, _ = pod.post(CHAT, body(prompt), tenant=tenant)
    assert status == 200
    return headers["x-infercache-cache"], headers.get("x-infercache-bypass-reason", "")


def wait_for(what: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll `what` until it is true (the shadow calls run after the answers)."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def verification(pod: GatewayPod) -> dict[str, Any]:
    """The verification part of `infercache stats --json` of the pod's sidecar."""
    assert pod.sidecar is not None
    out = run_cli("stats", "--admin", pod.sidecar.admin_target, "--json")
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)["verification"]
    return found


def counts(pod: GatewayPod) -> dict[str, int]:
    """Check outcomes by KIND/RESULT (one model version here)."""
    out: dict[str, int] = {}
    for name, n in verification(pod)["counts"].items():
        kind_result = name.split("/", 1)[1]
        out[kind_result] = out.get(kind_result, 0) + int(n)
    return out


def model_version(pod: GatewayPod) -> str:
    """The pod's model fingerprint, as the gateway reports it."""
    status, headers, _ = pod.post(CHAT, body(f"v {uuid.uuid4().hex}"), tenant="globex")
    assert status == 200
    return headers["x-infercache-model-version"]


def fill(pod: GatewayPod, prompts: list[str], tenant: str = "acme") -> None:
    """Store an answer for each prompt and let the baseline's second calls finish."""
    before = sum(n for k, n in counts(pod).items() if k.startswith("baseline/"))
    for p in prompts:
        assert served(pod, p, tenant)[0] == "miss"
    done = before + len(prompts)
    wait_for(lambda: sum(n for k, n in counts(pod).items() if k.startswith("baseline/")) >= done)


def test_changed_behaviour_quarantines_the_scope_until_acknowledged_or_invalidated() -> None:
    """A model server that starts prepending a new default system prompt under the same
    weights: the tenant's scope is quarantined (its hits stop, bypass verification_failed),
    another tenant's scope keeps its hits, an acknowledgement serves hits again, and
    after a second quarantine an Invalidate of the scope lifts it."""
    pod = GatewayPod(**FAST)
    try:
        prompts = [f"q{i} {uuid.uuid4().hex}" for i in range(40)]
        fill(pod, prompts)
        fill(pod, [other := f"globex {uuid.uuid4().hex}"], tenant="globex")
        for p in prompts:  # no drift: every hit served, none quarantined
            assert served(pod, p) == ("hit", "")
        pod.upstream.change_behaviour("system: You are terse.\n")
        wrong_hits = 0
        for i in range(400):
            outcome, reason = served(pod, prompts[i % len(prompts)])
            if outcome == "bypass":
                assert reason == "verification_failed"
                break
            assert outcome == "hit"
            wrong_hits += 1
            time.sleep(0.01)  # the shadow calls run meanwhile, as between real requests
        else:
            pytest.fail("the changed model server was never noticed")
        assert wrong_hits <= 60
        for p in prompts[:5]:  # the scope's hits stay stopped
            assert served(pod, p) == ("bypass", "verification_failed")
        assert served(pod, other, tenant="globex") == ("hit", "")
        states = {s["scope"]["tenant"]: s["state"] for s in verification(pod)["scopes"]}
        assert states["acme"] == "quarantined"
        assert states["globex"] != "quarantined"
        (event,) = verification(pod)["events"]
        assert event["action"] == "quarantined"
        assert event["scope"]["tenant"] == "acme"

        assert pod.sidecar is not None
        target = pod.sidecar.admin_target
        version = model_version(pod)
        ack = run_cli(
            "acknowledge-verification",
            "--admin",
            target,
            "--tenant",
            "acme",
            "--model-version",
            version,
            "--prompt-version",
            "default",
            "--reason",
            "the new system prompt is intended",
        )
        assert ack.returncode == 0, ack.stderr
        assert served(pod, prompts[0]) == ("hit", "")  # served again, judged afresh

        for i in range(400):  # the old entries still differ: quarantined again
            if served(pod, prompts[i % len(prompts)])[0] == "bypass":
                break
            time.sleep(0.01)
        else:
            pytest.fail("not quarantined again")
        admin_invalidate(pod.sidecar, tenant="acme", model_version=version)
        outcome, reason = served(pod, prompts[1])
        assert (outcome, reason) == ("miss", "")  # invalidated entries: a miss, not a bypass
    finally:
        pod.stop()


def test_natural_nondeterminism_alone_never_quarantines() -> None:
    """A model server whose answers differ run to run (5%, above the issue's 2%) and
    never drift: divergences are seen, the scope is never quarantined."""
    unlimited: dict[str, Any] = {
        "verify_rate": "1.0",
        "verify_max_per_s": "10000",
        "verify_max_concurrency": "32",
    }
    pod = GatewayPod(noise=0.05, **(FAST | unlimited))
    try:
        prompts = [f"n{i} {uuid.uuid4().hex}" for i in range(80)]
        fill(pod, prompts)
        for _ in range(5):
            for p in prompts:
                outcome, reason = served(pod, p)
                assert reason != "verification_failed"
                assert outcome == "hit"
        judged = ("hit/same", "hit/diverged")
        wait_for(lambda: sum(counts(pod).get(k, 0) for k in judged) >= 300)
        found = verification(pod)
        assert found["events"] == []
        assert all(s["state"] != "quarantined" for s in found["scopes"])
        checks = counts(pod)
        assert checks.get("hit/diverged", 0) > 0, checks  # the noise was really there
        assert checks.get("baseline/diverged", 0) > 0, checks
    finally:
        pod.stop()


def test_shadow_calls_never_delay_the_clients_answer() -> None:
    """With a model server that takes 600 ms and every hit checked, hits still answer
    at once; the shadow calls do reach the model server afterwards."""
    pod = GatewayPod(delay_ms=600, verify_rate="1.0", verify_baseline_rate="0")
    try:
        prompts = [f"slow {uuid.uuid4().hex}" for _ in range(4)]
        for p in prompts:
            assert served(pod, p)[0] == "miss"
        before = pod.upstream_calls()
        for p in prompts * 2:
            t0 = time.monotonic()
            assert served(pod, p) == ("hit", "")
            assert time.monotonic() - t0 < 0.3
        wait_for(lambda: pod.upstream_calls() >= before + 8)
    finally:
        pod.stop()
