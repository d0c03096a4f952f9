"""INFERCACHE_HEALTH_LISTEN: a probe-only port next to a loopback data plane, and the
pod's server info on the admin plane (what a deploy pipeline reads instead)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.processes import free_port
from tests.support.sidecars import INFERCACHE, SidecarProcess, clean_env, health_status

pytestmark = pytest.mark.e2e

TOKEN = "health-test-token-0123456789"


def test_health_port_serves_health_only_and_follows_the_server(tmp_path: Path) -> None:
    """The health port answers SERVING, refuses every data-plane RPC (UNIMPLEMENTED),
    GetStats carries GetServerInfo's answer, and SIGTERM still exits 0."""
    health = f"127.0.0.1:{free_port()}"
    proc = SidecarProcess(
        operator=True,
        admin=True,
        log_path=tmp_path / "serve.stderr",
        health_listen=health,
        env={"INFERCACHE_ADMIN_TOKENS": f"ops={TOKEN}"},
    )
    try:
        proc.wait_ready()
        data, admin = proc.target, proc.admin_target
        assert health_status(health) == health_pb2.HealthCheckResponse.SERVING
        with CacheClient(health) as on_health_port:
            with pytest.raises(grpc.RpcError) as refused:
                on_health_port.server_info(timeout=2)
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with CacheClient(data) as client:
            info = client.server_info(timeout=2)
        stats = subprocess.run(
            [str(INFERCACHE), "stats", "--admin", admin, "--json"],
            env=clean_env(INFERCACHE_ADMIN_TOKEN=TOKEN),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        server = json.loads(stats.stdout)["server"]
        assert server["server_version"] == info.server_version
        assert server["warm_tier"] == info.warm_tier == "embedded"
        assert server["model_version"] == info.model_version == ""
        assert pb.GetServerInfoResponse(**server) == info

        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=30) == 0
        assert '"health_ports": [' in proc.stderr()
    finally:
        proc.stop()
