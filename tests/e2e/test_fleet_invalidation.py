"""Two `infercache serve` processes on one Redis: an Invalidate through one is in force on
the other by the time it returns, through the RPC and through the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import grpc
import pytest
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.cluster import RedisClusterProcesses
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, bearer, cli_env, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(90)]


@pytest.fixture
def fleet(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> Iterator[tuple[SidecarProcess, SidecarProcess]]:
    """Sidecars A and B, separate processes sharing one redis-server or one Redis Cluster."""
    a = SidecarProcess(shared_redis.url)
    b = SidecarProcess(shared_redis.url)
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


def _fill(client: CacheClient, k: pb.CacheKey, payload: bytes) -> None:
    miss = client.lookup(k)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    assert client.store(k, payload, lease=miss.lease).outcome == pb.STORE_OUTCOME_STORED


def _hot_on(client: CacheClient, k: pb.CacheKey, payload: bytes) -> None:
    """Every lookup a HIT with the payload, until one comes from the hot tier.

    A sidecar whose fleet view is not confirmed within its freshness bound (a
    refresh delayed on a loaded machine) answers from the warm tier on purpose,
    so the hot answer may take a few lookups; it must come within the deadline.
    """
    deadline = time.monotonic() + 15
    while True:
        found = client.lookup(k)
        assert (found.outcome, found.payload) == (pb.LOOKUP_OUTCOME_HIT, payload)
        if found.tier == pb.TIER_HOT:
            return
        assert time.monotonic() < deadline, "the entry never reached the hot tier"
        time.sleep(0.05)


def test_invalidate_through_one_sidecar_is_in_force_on_the_other(
    fleet: tuple[SidecarProcess, SidecarProcess],
) -> None:
    """Stored via A and hot on B; Invalidate via A's admin plane; B misses right after it
    returns (no waiting), and an entry of another model version still hits on B."""
    a, b = fleet
    k = key("what is our refund policy?", model_version="fp-1.2")
    other = key("what is our refund policy?", model_version="fp-1.3")
    with CacheClient(a.target) as ca, CacheClient(b.target) as cb:
        _fill(ca, k, b"v1.2 answer")
        _fill(ca, other, b"v1.3 answer")
        _hot_on(cb, k, b"v1.2 answer")
        _hot_on(cb, other, b"v1.3 answer")
        with grpc.insecure_channel(a.admin_target) as channel:
            resp = admin_pb2_grpc.AdminServiceStub(channel).Invalidate(
                admin_pb.InvalidateRequest(
                    selector=admin_pb.Selector(model_version="fp-1.2"), reason="rollback"
                ),
                metadata=bearer("deployer"),
                timeout=10,
            )
        assert cb.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
        assert ca.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
        kept = cb.lookup(other)
        assert (kept.outcome, kept.payload) == (pb.LOOKUP_OUTCOME_HIT, b"v1.3 answer")
        assert resp.record.caller == "deployer"
        assert resp.record.epoch >= 1


def test_cli_invalidate_and_audit(fleet: tuple[SidecarProcess, SidecarProcess]) -> None:
    """`infercache invalidate` exits 1 for an unknown token (nothing happens) and 0 for a
    configured one once the fleet confirmed; B misses right after, and `infercache audit
    --json` lists exactly that record with the calling token's name."""
    a, b = fleet
    k = key("summarise this ticket", model_version="fp-2.0")
    with CacheClient(a.target) as ca, CacheClient(b.target) as cb:
        _fill(ca, k, b"summary")
        _hot_on(cb, k, b"summary")
        refused = run_cli(
            "invalidate",
            "--admin",
            a.admin_target,
            "--model-version",
            "fp-2.0",
            "--reason",
            "wrong token",
            env=cli_env(None) | {"INFERCACHE_ADMIN_TOKEN": "not-a-configured-token-1234"},
        )
        assert refused.returncode == 1
        assert "UNAUTHENTICATED" in refused.stderr
        assert cb.lookup(k).tier == pb.TIER_HOT
        done = run_cli(
            "invalidate",
            "--admin",
            a.admin_target,
            "--model-version",
            "fp-2.0",
            "--reason",
            "weights hotfix",
            env=cli_env("pipeline"),
        )
        assert done.returncode == 0, done.stderr
        assert cb.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
    audit = run_cli("audit", "--admin", b.admin_target, "--json", env=cli_env("deployer"))
    assert audit.returncode == 0, audit.stderr
    records = [json.loads(line) for line in audit.stdout.splitlines() if line.strip()]
    assert len(records) == 1
    [record] = records
    assert record["caller"] == "pipeline"
    assert record["reason"] == "weights hotfix"
    assert record["selector"]["model_version"] == "fp-2.0"
    assert int(record["epoch"]) >= 1
