"""A sidecar that exports traces or metrics over OTLP to a collector that is not there
still exits 0 within its grace period + 1 s of SIGTERM (issue 26, item 5): the
exporters get a short budget for their last flush, then their retries are cut short
(the SDK alone retried for up to 10 s per signal)."""

from __future__ import annotations

import signal
import time

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.keys import key
from tests.support.processes import free_port
from tests.support.sidecars import SidecarProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

GRACE_S = 1


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
@pytest.mark.parametrize("exported", ["traces", "metrics"])
def test_sigterm_exits_within_the_grace_period_when_no_collector_listens(
    exported: str, protocol: str
) -> None:
    """Traffic first, so that spans (or metric points) are pending; nothing is exported
    before the SIGTERM (long batch and export intervals); the endpoint is a closed port."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_TRACES_EXPORTER": "otlp" if exported == "traces" else "none",
        "OTEL_METRICS_EXPORTER": "otlp" if exported == "metrics" else "none",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_METRIC_EXPORT_INTERVAL": "60000",
    }
    # The KV tier is off: its torch import runs on a thread for seconds after start, and a
    # process stopped during it waits for it at exit, whatever telemetry does.
    sc = SidecarProcess("", env=env, grace_period_s=str(GRACE_S), kv_enabled="false")
    try:
        sc.wait_ready()
        with CacheClient(sc.target) as client:
            for i in range(20):
                assert client.lookup(key(f"pending span {i}")).outcome == pb.LOOKUP_OUTCOME_MISS
        started = time.monotonic()
        sc.proc.send_signal(signal.SIGTERM)
        code = sc.proc.wait(timeout=30)
        elapsed = time.monotonic() - started
        assert code == 0, sc.log()
        assert elapsed <= GRACE_S + 1, f"took {elapsed:.2f} s to exit: {sc.log()}"
        # The last flush was under way, retrying, when its budget ran out.
        assert "telemetry_flush_cut_short" in sc.stderr(), sc.log()
    finally:
        sc.stop()
