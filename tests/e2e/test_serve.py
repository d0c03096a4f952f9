"""`infercache serve` as operators run it: TCP and Unix socket, health, SIGTERM, errors, logs."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, make_key

from tests.support.processes import free_port
from tests.support.sidecars import INFERCACHE, SidecarProcess, health_status, isolated_env

pytestmark = pytest.mark.e2e

SECRET_PROMPT = "e2e-secret-prompt-7c1f: what is my account number?"
GRACE_S = 3


def secret_key(**extra: Any) -> pb.CacheKey:
    return make_key(
        tenant="acme", model_version="fp1-e2e", prompt_version="p1", text=SECRET_PROMPT, **extra
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SidecarProcess, str, str]]:
    """One sidecar listening on TCP and on a Unix socket: (process, tcp target, unix target)."""
    tmp = tmp_path_factory.mktemp("serve")
    tcp = f"127.0.0.1:{free_port()}"
    unix = f"unix:{tmp / 'ic.sock'}"
    proc = SidecarProcess(
        operator=True, log_path=tmp / "serve.stderr", listen=f"{tcp},{unix}", log_level="debug"
    )
    try:
        proc.wait_ready()
        yield proc, tcp, unix
    finally:
        proc.stop()


def test_store_over_tcp_then_hit_over_unix_and_back(
    served: tuple[SidecarProcess, str, str],
) -> None:
    """A result stored through one listener is a HIT through the other."""
    _, tcp, unix = served
    with CacheClient(tcp) as over_tcp, CacheClient(unix) as over_unix:
        k1, k2 = secret_key(), secret_key(max_tokens=7)
        miss = over_tcp.lookup(k1)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
        stored = over_tcp.store(k1, b"stored over tcp", lease=miss.lease)
        assert stored.outcome == pb.STORE_OUTCOME_STORED
        hit = over_unix.lookup(k1)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"stored over tcp")

        miss = over_unix.lookup(k2)
        over_unix.store(k2, b"stored over unix", lease=miss.lease)
        hit = over_tcp.lookup(k2)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"stored over unix")


def test_health_is_serving_on_both_listeners(served: tuple[SidecarProcess, str, str]) -> None:
    """grpc.health.v1 answers SERVING over TCP and over the Unix socket."""
    _, tcp, unix = served
    assert health_status(tcp) == health_pb2.HealthCheckResponse.SERVING
    assert health_status(unix) == health_pb2.HealthCheckResponse.SERVING


def test_sigterm_exits_zero_within_the_grace_period(tmp_path: Path) -> None:
    """On SIGTERM the server drains and exits 0 well within its grace period."""
    proc = SidecarProcess(operator=True, log_path=tmp_path / "serve.stderr", grace_period_s=GRACE_S)
    try:
        proc.wait_ready()
        with CacheClient(proc.target) as client:
            assert client.lookup(secret_key()).outcome == pb.LOOKUP_OUTCOME_MISS
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        rc = proc.proc.wait(timeout=GRACE_S + 5)
        elapsed = time.monotonic() - started
        assert rc == 0, proc.stderr()
        assert elapsed < GRACE_S + 1, f"took {elapsed:.1f} s to stop"
        events = [json.loads(line)["event"] for line in proc.stderr().splitlines() if line]
        assert "draining" in events
        assert events[-1] == "stopped"
    finally:
        proc.stop()


def test_logs_are_json_lines_without_prompt_text(tmp_path: Path) -> None:
    """Every log line is a JSON object, and none contains the prompt of a request served."""
    proc = SidecarProcess(
        operator=True, log_path=tmp_path / "serve.stderr", log_level="debug", max_payload_bytes=64
    )
    try:
        proc.wait_ready()
        with CacheClient(proc.target) as client:
            k = secret_key()
            miss = client.lookup(k)
            client.store(k, b"answer", lease=miss.lease)
            assert client.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
            # Error paths too: an invalid key and an oversized payload, both carrying the prompt.
            bad = make_key(tenant="", model_version="m", prompt_version="p", text=SECRET_PROMPT)
            with pytest.raises(grpc.RpcError, match=r"key\.tenant"):
                client.lookup(bad)
            with pytest.raises(grpc.RpcError, match="payload"):
                client.store(k, SECRET_PROMPT.encode() * 10, lease=miss.lease)
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=15) == 0
        lines = [line for line in proc.stderr().splitlines() if line.strip()]
        assert len(lines) >= 3  # serving, draining, stopped at least
        for line in lines:
            record = json.loads(line)
            assert isinstance(record, dict)
            assert {"event", "level", "timestamp"} <= record.keys()
        text = "\n".join(lines)
        assert SECRET_PROMPT not in text
        assert "e2e-secret-prompt" not in text
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("env", "flags", "named"),
    [
        ({"INFERCACHE_HOT_MAX_BYTES": "lots"}, [], "INFERCACHE_HOT_MAX_BYTES"),
        ({"INFERCACHE_LISTEN": "nowhere"}, [], "INFERCACHE_LISTEN"),
        ({}, ["--max-batch", "0"], "--max-batch"),
        ({"INFERCACHE_MAX_BATCH": "8"}, ["--lookup-timeout-ms", "soon"], "--lookup-timeout-ms"),
    ],
)
def test_bad_config_exits_2_naming_the_setting(
    env: dict[str, str], flags: list[str], named: str
) -> None:
    """An invalid setting stops `serve` with exit status 2 and names the variable or flag."""
    result = subprocess.run(
        [str(INFERCACHE), "serve", *flags],
        env=isolated_env(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
