"""Shadow verification of the gRPC data plane through real processes: a sidecar with
INFERCACHE_VERIFY_DATA_PLANE, the stand-in model server over HTTP, and a gRPC caller that
computes its misses there and stores each answer with its request attached (`replay`)
(docs/verification.md)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb

from tests.support.data_plane import DataPlanePod, wait_for
from tests.support.processes import RedisServer
from tests.support.sidecars import run_cli

pytestmark = pytest.mark.e2e

FAST: dict[str, Any] = {
    # Every Store computed twice and half the hits checked: the test's minutes, not hours.
    "verify_data_plane": "true",
    "verify_baseline_rate": "1.0",
    "verify_rate": "0.5",
    "verify_false_alarm": "0.0001",
}


def baseline_checks(pod: DataPlanePod) -> int:
    """Stores computed a second time and judged so far."""
    return sum(n for k, n in pod.counts().items() if k in ("baseline/same", "baseline/diverged"))


@pytest.mark.parametrize("form", ["openai_json", "text"])
def test_changed_behaviour_quarantines_the_scope_for_grpc_lookups(form: str) -> None:
    """A model server that starts prepending a new default system prompt under the same
    weights: sampled gRPC hits are re-sent (their recorded requests), the tenant's scope
    is quarantined and its Lookups (and LookupBatch) answer BYPASS verification_failed;
    whether the caller stored the whole OpenAI body or only the text."""
    pod = DataPlanePod(form=form, **FAST)
    try:
        keys = [pod.fill(f"q{i} {uuid.uuid4().hex}") for i in range(30)]
        wait_for(lambda: baseline_checks(pod) >= len(keys))
        assert pod.counts().get("baseline/diverged", 0) == 0
        for k in keys:  # no drift: every hit served
            assert pod.client.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
        wait_for(lambda: pod.counts().get("hit/same", 0) >= 5)
        assert pod.counts().get("hit/diverged", 0) == 0
        pod.upstream.change_behaviour("system: You are terse.\n")
        wrong_hits = 0
        for i in range(400):
            found = pod.client.lookup(keys[i % len(keys)])
            if found.outcome == pb.LOOKUP_OUTCOME_BYPASS:
                assert found.bypass_code == pb.BYPASS_REASON_VERIFICATION_FAILED
                break
            assert found.outcome == pb.LOOKUP_OUTCOME_HIT
            wrong_hits += 1
            time.sleep(0.01)  # the shadow calls run meanwhile, as between real requests
        else:
            pytest.fail("the changed model server was never noticed")
        assert wrong_hits <= 60
        for found in pod.client.lookup_batch(keys[:5]):
            assert found.outcome == pb.LOOKUP_OUTCOME_BYPASS
            assert found.bypass_code == pb.BYPASS_REASON_VERIFICATION_FAILED
        found_stats = pod.verification()
        (scope,) = found_stats["scopes"]
        assert scope["state"] == "quarantined"
        (event,) = found_stats["events"]
        assert (event["action"], event["scope"]["tenant"]) == ("quarantined", "acme")
    finally:
        pod.stop()


def test_without_the_opt_in_grpc_hits_cause_no_shadow_calls() -> None:
    """INFERCACHE_VERIFY_DATA_PLANE off (the default), every rate at 1: Stores with a
    replay and their hits send nothing to the model server beyond the caller's own calls."""
    pod = DataPlanePod(verify_rate="1.0", verify_baseline_rate="1.0")
    try:
        keys = [pod.fill(f"off {uuid.uuid4().hex}") for _ in range(5)]
        for _ in range(4):
            for k in keys:
                assert pod.client.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
        time.sleep(1.0)  # time for any shadow call to arrive
        assert pod.upstream_calls() == len(keys)
        assert pod.verification()["counts"] == {}
    finally:
        pod.stop()


def test_shadow_calls_never_delay_the_grpc_lookup() -> None:
    """With a model server that takes 2 s and every hit checked, gRPC Lookups still
    answer at once (well under the 2 s a Lookup waiting for its shadow call would take;
    the margin is for the sidecar's own pauses, e.g. a full garbage collection of
    ~0.15 s CPU, on a loaded machine); the shadow calls (each hit's recorded request)
    reach the model server afterwards."""
    pod = DataPlanePod(
        delay_ms=2000, verify_data_plane="true", verify_rate="1.0", verify_baseline_rate="0"
    )
    try:
        keys = [pod.fill(f"slow {uuid.uuid4().hex}") for _ in range(4)]
        before = pod.upstream_calls()
        for k in keys * 2:
            t0 = time.monotonic()
            assert pod.client.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
            assert time.monotonic() - t0 < 1.0
        wait_for(lambda: pod.upstream_calls() >= before + 8)
        wait_for(lambda: pod.counts().get("hit/same", 0) >= 8)
    finally:
        pod.stop()


def drift_until_quarantined(pod: DataPlanePod, keys: list[pb.CacheKey]) -> None:
    """Change the model server's behaviour and look the keys up until their scope is
    quarantined (BYPASS verification_failed)."""
    pod.upstream.change_behaviour("system: You are terse.\n")
    for i in range(400):
        if pod.client.lookup(keys[i % len(keys)]).outcome == pb.LOOKUP_OUTCOME_BYPASS:
            return
        time.sleep(0.01)
    pytest.fail("the changed model server was never noticed")


def test_quarantine_events_outlive_a_restart_with_redis(redis_server: RedisServer) -> None:
    """With Redis, a quarantine and its acknowledgement are written to the fleet's signed
    event log with the sidecar's member id: after the sidecar restarts (its ledger empty)
    `infercache stats` still lists both."""
    pod = DataPlanePod(redis_server.url, **FAST)
    try:
        keys = [pod.fill(f"a{i} {uuid.uuid4().hex}") for i in range(20)]
        wait_for(lambda: baseline_checks(pod) >= len(keys))
        drift_until_quarantined(pod, keys)
        (scope,) = pod.verification()["scopes"]
        ack = run_cli(
            "acknowledge-verification",
            "--admin",
            pod.sidecar.admin_target,
            "--model-version",
            scope["scope"]["model_version"],
            "--tenant",
            "acme",
            "--prompt-version",
            "p1",
            "--reason",
            "the new system prompt is intended",
        )
        assert ack.returncode == 0, ack.stderr
        # The log is written in the background (a bounded queue): wait until both are in.
        wait_for(lambda: len(pod.verification()["events"]) >= 2)
        before = pod.verification()["events"]
        assert [e["action"] for e in before] == ["quarantined", "acknowledged"]
        pod.restart()
        found = pod.verification()
        assert found["scopes"] == []  # a new ledger...
        after = found["events"]  # ...and the events it did not raise
        assert [e["action"] for e in after] == ["quarantined", "acknowledged"]
        assert after == before
        assert after[1]["caller"] == "deployer"
        member = after[0]["member_id"]
        assert member
        assert after[1]["member_id"] == member
    finally:
        pod.stop()
