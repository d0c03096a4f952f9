"""`infercache serve` re-checks its model files: weights replaced or patched in place
under a running sidecar are re-measured, nothing is stored under the old fingerprint
meanwhile, and the new fingerprint is in force afterwards (real process, real files)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient
from infercache_client.fingerprint import fingerprint

from tests.support.checkpoints import llama_tensors, lora_tensors, write_adapter, write_model
from tests.support.keys import key
from tests.support.metrics import event_counters
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SHARD = "model.safetensors"
# Deadlines of the calls here: generous, since a loaded 2-core machine is no reason
# for a wrong answer and speed is not what is tested.
SLOW = 30.0


def until(condition: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    """Poll `condition` until it holds (the watcher polls every second); fail naming
    `what` if it never does. A bound on waiting, not a timed assertion."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def store_code(client: CacheClient, k: pb.CacheKey, payload: bytes) -> str:
    """The status of a Store after a Lookup: "OK" when stored, else the code's name,
    with "(re-measuring)" when refused because the fingerprint is being re-measured."""
    try:
        miss = client.lookup(k, timeout=SLOW)
        out = client.store(k, payload, lease=miss.lease, timeout=SLOW)
    except grpc.RpcError as exc:
        remeasuring = "being re-measured" in (exc.details() or "")
        code: grpc.StatusCode = exc.code()
        return str(code.name) + (" (re-measuring)" if remeasuring else "")
    assert out.outcome == pb.STORE_OUTCOME_STORED
    return "OK"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "model", llama_tensors(layers=1, seed=3))


@pytest.fixture
def pod(model: Path) -> Iterator[SidecarProcess]:
    proc = SidecarProcess(None, metrics=True, model_path=str(model), model_recheck_interval_s=1)
    try:
        proc.wait_ready(timeout_s=60)
        yield proc
    finally:
        proc.stop()


def test_replaced_weights_refuse_stores_until_re_measured_then_serve_the_new_version(
    pod: SidecarProcess, model: Path
) -> None:
    """Once the shard is replaced by a half-written one (its measurement fails, so the
    re-check stays pending: observable without timing), Stores under the implicit or
    the old fingerprint are FAILED_PRECONDITION naming the change and the old entry is a
    MISS; once whole new weights are in place GetServerInfo shows their fingerprint, a
    store/lookup round trip works under it, the old entry never hits, the old
    fingerprint is refused as foreign, and a log line and a counter say it changed."""
    old_fp = fingerprint(model).value
    implicit = key("what changed?", model_version="")
    with CacheClient(pod.target) as client:
        assert client.server_info(timeout=SLOW).model_version == old_fp
        assert store_code(client, implicit, b"old weights' answer") == "OK"
        assert client.lookup(implicit, timeout=SLOW).payload == b"old weights' answer"
        (model / SHARD).write_bytes(b"\xff" * 8)  # a copy cut short: no valid header
        until(
            lambda: store_code(client, implicit, b"x") == "FAILED_PRECONDITION (re-measuring)",
            "stores refused after the shard changed",
        )
        with pytest.raises(grpc.RpcError) as refused:
            client.store(key("what changed?", model_version=old_fp), b"x", timeout=SLOW)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "changed" in (refused.value.details() or "")
        assert "re-measured" in (refused.value.details() or "")
        doubted = client.lookup(implicit, timeout=SLOW)
        assert doubted.outcome == pb.LOOKUP_OUTCOME_MISS
        assert client.server_info(timeout=SLOW).model_version == old_fp  # no new fingerprint yet

        write_model(model, llama_tensors(layers=1, seed=4))
        new_fp = fingerprint(model).value
        assert new_fp != old_fp
        until(
            lambda: client.server_info(timeout=SLOW).model_version == new_fp, "the new fingerprint"
        )
        assert client.lookup(implicit, timeout=SLOW).outcome == pb.LOOKUP_OUTCOME_MISS
        assert store_code(client, implicit, b"new weights' answer") == "OK"
        hit = client.lookup(implicit, timeout=SLOW)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"new weights' answer")
        assert (
            client.lookup(key("what changed?", model_version=new_fp), timeout=SLOW).payload
            == hit.payload
        )
        with pytest.raises(grpc.RpcError) as foreign:
            client.store(key("other question", model_version=old_fp), b"x", timeout=SLOW)
        assert foreign.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "not this pod's model" in (foreign.value.details() or "")
    events = event_counters(pod, "infercache_identity_events")
    assert events["changes"] == 1
    assert events["remeasure_failures"] >= 1
    assert events["stale_store_refusals"] >= 2
    assert "identity_changed" in pod.stderr()


def test_a_shard_patched_in_place_with_its_mtime_restored_is_re_measured(
    pod: SidecarProcess, model: Path
) -> None:
    """Same size, same inode, same mtime: only st_ctime_ns moves, and it is enough; the
    fingerprint in GetServerInfo becomes the patched files' and the entry stored before
    never hits under it."""
    old_fp = fingerprint(model).value
    implicit = key("patched?", model_version="")
    shard = model / SHARD
    with CacheClient(pod.target) as client:
        assert store_code(client, implicit, b"before the patch") == "OK"
        st = shard.stat()
        with shard.open("r+b") as f:  # the last byte is in every tensor sample
            f.seek(st.st_size - 1)
            last = f.read(1)
            f.seek(st.st_size - 1)
            f.write(bytes([last[0] ^ 0x5A]))
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = shard.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ino,
        )
        new_fp = fingerprint(model).value
        assert new_fp != old_fp
        until(
            lambda: client.server_info(timeout=SLOW).model_version == new_fp,
            "the patched fingerprint",
        )
        assert client.lookup(implicit, timeout=SLOW).outcome == pb.LOOKUP_OUTCOME_MISS


def test_a_changed_adapter_is_re_measured_the_same_way(tmp_path: Path) -> None:
    """An adapter's files are watched like the model's: new adapter weights show up
    under its name in GetServerInfo, and keys naming the adapter use the new fingerprint."""
    adapter = write_adapter(tmp_path / "sql", lora_tensors(seed=1))
    old_fp = fingerprint(adapter, kind="adapter").value
    proc = SidecarProcess(None, adapters=f"sql={adapter}", model_recheck_interval_s=1)
    try:
        proc.wait_ready(timeout_s=60)
        tuned = key("top customers", adapter_version="sql")
        with CacheClient(proc.target) as client:
            assert client.server_info(timeout=SLOW).adapter_versions["sql"] == old_fp
            assert store_code(client, tuned, b"old adapter") == "OK"
            write_adapter(adapter, lora_tensors(seed=2))
            new_fp = fingerprint(adapter, kind="adapter").value
            until(
                lambda: client.server_info(timeout=SLOW).adapter_versions["sql"] == new_fp,
                "the adapter's new fingerprint",
            )
            assert client.lookup(tuned, timeout=SLOW).outcome == pb.LOOKUP_OUTCOME_MISS
            assert store_code(client, tuned, b"new adapter") == "OK"
            assert client.lookup(tuned, timeout=SLOW).payload == b"new adapter"
    finally:
        proc.stop()
