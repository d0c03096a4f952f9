"""`infercache serve` as deployed: /metrics scraped over HTTP, `infercache stats --json`, and
spans exported over OTLP (the standard OTEL_* variables) to a collector run by the test."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.support.keys import key
from tests.support.processes import REPO
from tests.support.sidecars import SidecarProcess, cli_env, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

PROMPTS_A = [f"kiwi-basalt question {i}" for i in range(3)]
PROMPT_B = "lemur-cobalt question"


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace endpoint that keeps every export request."""

    metrics: MetricsCollector

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[Any]:
        with self._lock:
            reqs = list(self.requests)
        return [
            s for r in reqs for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
        ]


class MetricsCollector(metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP/gRPC metrics endpoint that keeps the latest value per (name, attributes)."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        data = m.sum if m.HasField("sum") else m.gauge
                        for p in data.data_points:
                            attrs = tuple(
                                sorted((a.key, a.value.string_value) for a in p.attributes)
                            )
                            self.points[m.name, attrs] = p.as_int or p.as_double
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def get(self, name: str, **attrs: str) -> float | None:
        with self._lock:
            return self.points.get((name, tuple(sorted(attrs.items()))))


@pytest.fixture
def collector() -> Iterator[tuple[Collector, int]]:
    """A collector on a free port (traces; metrics on .metrics)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    sink = Collector()
    sink.metrics = MetricsCollector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(sink.metrics, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield sink, port
    server.stop(0)


@pytest.fixture
def served(collector: tuple[Collector, int]) -> Iterator[SidecarProcess]:
    """A sidecar with /metrics on a free port, traces and metrics sent to the collector."""
    _, port = collector
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    proc = SidecarProcess("", env=env, metrics=True)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def _scrape(proc: SidecarProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    port = proc.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _lookups(samples: dict[Any, float], version: str, outcome: str, tier: str) -> float:
    labels = (("model_version", version), ("outcome", outcome), ("tier", tier))
    return samples.get(("infercache_lookups_total", labels), 0.0)


def test_metrics_stats_and_spans_agree(
    served: SidecarProcess, collector: tuple[Collector, int]
) -> None:
    """Per-version series on /metrics, the same numbers from `infercache stats --json`, and
    OTLP spans with the RPC attributes and no prompt text."""
    with CacheClient(served.target) as client:
        for text in PROMPTS_A:
            k = key(text, model_version="fp-A")
            miss = client.lookup(k)
            assert client.store(k, b"answer", lease=miss.lease).outcome == pb.STORE_OUTCOME_STORED
            for _ in range(2):
                assert client.lookup(k).outcome == pb.LOOKUP_OUTCOME_HIT
        for _ in range(2):
            assert client.lookup(key(PROMPT_B, model_version="fp-B")).outcome == (
                pb.LOOKUP_OUTCOME_MISS
            )

    samples = _scrape(served)
    assert _lookups(samples, "fp-A", "hit", "hot") == 6
    # A version takes a label once this fleet stored it: fp-A's first MISS came before
    # its first Store, and fp-B was only ever looked up, so those three count as _other.
    assert _lookups(samples, "fp-A", "miss", "none") == 2
    assert _lookups(samples, "_other", "miss", "none") == 3
    assert _lookups(samples, "fp-B", "miss", "none") == 0
    stored = (
        "infercache_stores_total",
        (("model_version", "fp-A"), ("reason", "none"), ("result", "stored")),
    )
    assert samples[stored] == 3
    lookup_ok = ("infercache_rpc_duration_seconds_count", (("code", "OK"), ("rpc", "Lookup")))
    assert samples[lookup_ok] == 11

    done = run_cli("stats", "--admin", served.admin_target, "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["versions"]["fp-A"]["lookups"] == {"hit.hot": 6, "miss": 2}
    assert stats["versions"]["_other"]["lookups"] == {"miss": 3}
    assert "fp-B" not in stats["versions"]
    assert stats["versions"]["fp-A"]["stores"] == {"stored": 3}
    assert stats["counters"]["lookups.hit.hot"] == 6
    table = run_cli("stats", "--admin", served.admin_target)
    assert table.returncode == 0, table.stderr
    assert "fp-A" in table.stdout
    assert "_other" in table.stdout

    sink, _ = collector
    deadline = time.monotonic() + 15
    while len(sink.spans()) < 14 and time.monotonic() < deadline:
        time.sleep(0.1)
    spans = sink.spans()
    lookups = [s for s in spans if s.name == "infercache.v1.CacheService/Lookup"]
    assert len(lookups) == 11
    assert len([s for s in spans if s.name == "infercache.v1.CacheService/Store"]) == 3
    attrs = [{a.key: a.value for a in s.attributes} for s in lookups]
    versions = sorted(a["infercache.model_version"].string_value for a in attrs)
    assert versions == ["fp-A"] * 9 + ["fp-B"] * 2
    assert {a["infercache.outcome"].string_value for a in attrs} == {"hit", "miss"}
    exported = b"".join(r.SerializeToString() for r in sink.requests)
    for text in (*PROMPTS_A, PROMPT_B, "acme"):
        assert text.encode() not in exported

    # The same counters over OTLP (exported every 200 ms).
    hits = {"model_version": "fp-A", "outcome": "hit", "tier": "hot"}
    deadline = time.monotonic() + 15
    while sink.metrics.get("infercache.lookups", **hits) != 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sink.metrics.get("infercache.lookups", **hits) == 6
    assert (
        sink.metrics.get("infercache.lookups", model_version="_other", outcome="miss", tier="none")
        == 3
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_stats_watch_json_prints_a_line_per_refresh(
    served: SidecarProcess, stop: signal.Signals
) -> None:
    """`infercache stats --json --watch S` prints one JSON document per refresh until
    SIGINT or SIGTERM, even when started with SIGINT ignored (a background job)."""
    # As a shell starts a background job: SIGINT ignored (kept across exec), whatever
    # pytest itself inherited.
    ignore_sigint = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    ignore_sigint += "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    argv = [sys.executable, "-c", ignore_sigint, "-m", "sidecar", "stats"]
    with subprocess.Popen(
        [*argv, "--admin", served.admin_target, "--json", "--watch", "0.2"],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        proc.send_signal(stop)
        proc.communicate(timeout=10)
    docs = [json.loads(line) for line in lines]
    assert [d["member_id"] for d in docs] == [docs[0]["member_id"]] * 3
    assert docs[2]["uptime_seconds"] > docs[0]["uptime_seconds"]
    assert proc.returncode == 0
