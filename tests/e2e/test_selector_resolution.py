"""Invalidation selectors resolve adapter names exactly as keys do, on real sidecars."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient
from infercache_client.fingerprint import fingerprint

from tests.support.checkpoints import llama_tensors, lora_tensors, write_adapter, write_model
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess, cli_env, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def pod_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small real safetensors model and a LoRA adapter."""
    root = tmp_path_factory.mktemp("pod")
    return write_model(root / "model", llama_tensors()), write_adapter(
        root / "adapter", lora_tensors()
    )


@pytest.fixture
def fleet(
    redis_server: RedisServer, pod_dirs: tuple[Path, Path]
) -> Iterator[tuple[SidecarProcess, SidecarProcess]]:
    """Two `infercache serve` pods on one Redis, both serving the adapter named "sql"."""
    model, adapter = pod_dirs
    pods = [
        SidecarProcess(redis_server.url, model_path=str(model), adapters=f"sql={adapter}")
        for _ in range(2)
    ]
    try:
        for p in pods:
            p.wait_ready()
        yield pods[0], pods[1]
    finally:
        for p in pods:
            p.stop()


def test_invalidate_by_adapter_name_kills_entries_keyed_by_that_name(
    fleet: tuple[SidecarProcess, SidecarProcess], pod_dirs: tuple[Path, Path]
) -> None:
    """`infercache invalidate --adapter sql` used to commit a rule for the literal "sql"
    (~0 entries) while entries stored with adapter_version="sql" are keyed by the
    adapter's fingerprint and kept hitting; now the name resolves as in keys: both pods
    miss, the audit record names the fingerprint, and the base model's entry survives."""
    a, b = fleet
    sql_fp = fingerprint(pod_dirs[1], kind="adapter").value
    tuned = key("top customers by revenue", model_version="", adapter_version="sql")
    base = key("top customers by revenue", model_version="")
    with CacheClient(a.target) as ca, CacheClient(b.target) as cb:
        for k, answer in ((tuned, b"SELECT ..."), (base, b"base answer")):
            miss = ca.lookup(k)
            assert ca.store(k, answer, lease=miss.lease).outcome == pb.STORE_OUTCOME_STORED
            assert cb.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
            # A warm hit promotes the entry to b's hot tier, but b answers from memory only
            # while its rule view is confirmed current; on a loaded machine a refresh can
            # lag, and the warm read answers instead. What matters is that the entry is
            # held hot before the invalidation, so ask until b answers from memory.
            tiers = []
            for _ in range(300):  # up to ~30 s: the confirmation is late, never absent
                tiers.append(cb.lookup(k).tier)
                if tiers[-1] == pb.TIER_HOT:
                    break
                time.sleep(0.1)
            assert tiers[-1] == pb.TIER_HOT, tiers
        done = run_cli(
            "invalidate", "--admin", a.admin_target, "--adapter", "sql",
            "--reason", "adapter retrained", "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert ca.lookup(tuned).outcome == pb.LOOKUP_OUTCOME_MISS
        assert cb.lookup(tuned).outcome == pb.LOOKUP_OUTCOME_MISS
        assert json.loads(done.stdout)["selector"]["adapter_version"] == sql_fp
        kept = cb.lookup(base)
        assert (kept.outcome, kept.payload) == (pb.LOOKUP_OUTCOME_HIT, b"base answer")


def test_selector_naming_an_unknown_adapter_is_refused_and_not_committed(
    fleet: tuple[SidecarProcess, SidecarProcess], pod_dirs: tuple[Path, Path]
) -> None:
    """A selector naming an adapter the pod does not serve was committed as a rule that
    kills nothing (exit 0); now it is FAILED_PRECONDITION naming the adapter, and the
    audit log stays empty. The adapter's fingerprint is accepted as it is."""
    a, _ = fleet
    refused = run_cli(
        "invalidate", "--admin", a.admin_target, "--adapter", "sql-v2", "--reason", "typo",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "FAILED_PRECONDITION" in refused.stderr
    assert "'sql-v2'" in refused.stderr
    audit = run_cli("audit", "--admin", a.admin_target, "--json", env=cli_env())
    assert audit.returncode == 0, audit.stderr
    assert audit.stdout.strip() == ""
    by_fingerprint = run_cli(
        "invalidate", "--admin", a.admin_target,
        "--adapter", fingerprint(pod_dirs[1], kind="adapter").value, "--reason", "by fp",
    )  # fmt: skip
    assert by_fingerprint.returncode == 0, by_fingerprint.stderr
