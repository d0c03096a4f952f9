"""Per-version telemetry of a real in-process sidecar (real gRPC) with in-memory exporters.

The sidecar gets its own tracer and meter providers (InMemorySpanExporter,
InMemoryMetricReader), as start_server's `telemetry` argument allows: no globals.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import structlog
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient, make_key, make_traits
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import StatusCode

from sidecar.host import RunningServer
from sidecar.observability.logs import processors
from sidecar.observability.telemetry import Telemetry
from sidecar.testing import in_process_sidecar
from sidecar.tiers.base import WarmItem

TENANT = "acme-secret-tenant"
# Distinctive prompt texts: nothing the sidecar exports may contain any of them.
PROMPTS_A = [f"zebra-quartz prompt alpha number {i}" for i in range(10)]
PROMPTS_B = [f"violet-okapi prompt beta number {i}" for i in range(5)]
PAYLOAD = b"the cached answer: mango-tundra"


@dataclass
class Captured:
    """A running sidecar and everything its telemetry emitted."""

    running: RunningServer
    client: AsyncCacheClient
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    logs: io.StringIO

    def finished_spans(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], float]]:
        """(attributes, value) of every data point of one metric."""
        data = self.metrics.get_metrics_data()
        assert data is not None
        out = []
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        out += [(dict(p.attributes or {}), p.value) for p in m.data.data_points]  # type: ignore[union-attr]
        return out

    def value(self, name: str, **attrs: str) -> float:
        """Sum of a metric's points whose attributes include `attrs`."""
        return sum(v for a, v in self.points(name) if all(a.get(k) == x for k, x in attrs.items()))


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    """structlog writes JSON lines (the production processors) into a buffer for the test."""
    buf = io.StringIO()
    structlog.configure(
        processors=processors(structlog.processors.JSONRenderer()),
        logger_factory=structlog.PrintLoggerFactory(file=buf),
        cache_logger_on_first_use=False,
    )
    yield buf
    structlog.reset_defaults()


@pytest.fixture
async def captured(log_buffer: io.StringIO) -> AsyncIterator[Captured]:
    """A sidecar (embedded stores, unleased stores allowed) with in-memory telemetry."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=ALWAYS_ON)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider, meter_provider, tenants_in_clear=False, tracing=True)
    settings = {"allow_unleased_store": "true", "log_level": "debug"}
    try:
        async with in_process_sidecar(settings, telemetry=telemetry) as sc:
            yield Captured(sc.running, sc.client, spans, reader, log_buffer)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


async def eventually(done: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait (bounded) until done() holds; the caller's assertions then say what was wrong."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return
        await asyncio.sleep(0.01)


def _key(version: str, text: str) -> pb.CacheKey:
    return make_key(tenant=TENANT, model_version=version, prompt_version="p-v3", text=text)


async def scripted_workload(c: Captured) -> None:
    """10 lookups on A (7 hits); 8 on B: 1 hit, 5 misses (one reads a corrupt entry), 2
    bypasses."""
    cost = pb.ComputeCost(latency_ms=800, prompt_tokens=100, completion_tokens=50)
    for text in PROMPTS_A[:7]:
        assert (await c.client.store(_key("A", text), PAYLOAD, cost=cost)).outcome == (
            pb.STORE_OUTCOME_STORED
        )
    assert (await c.client.store(_key("B", PROMPTS_B[0]), PAYLOAD)).outcome == (
        pb.STORE_OUTCOME_STORED
    )
    # A value that fails verification, under B's key for PROMPTS_B[1] (nothing in the hot tier).
    corrupt = await c.client.lookup(_key("B", PROMPTS_B[1]))  # a miss: counted below
    await c.running.cache.warm.put_many([WarmItem(corrupt.key_digest, b"ICE garbage", 60_000)])  # type: ignore[arg-type]
    for text in PROMPTS_A:
        await c.client.lookup(_key("A", text))
    for text in PROMPTS_B[2:]:
        await c.client.lookup(_key("B", text))
    await c.client.lookup(_key("B", PROMPTS_B[0]))  # the one B hit
    await c.client.lookup(_key("B", PROMPTS_B[1]))  # ... reads the corrupt value: a miss
    # Declared side effects: the default cacheability policy answers BYPASS.
    for text in PROMPTS_B[2:4]:
        bypass = await c.client.lookup(_key("B", text), traits=make_traits(side_effects=True))
        assert bypass.outcome == pb.LOOKUP_OUTCOME_BYPASS


async def test_workload_counts_per_version_and_outcome(captured: Captured) -> None:
    """The scripted workload yields exactly its counts per model version and outcome."""
    c = captured
    await scripted_workload(c)
    # Lookups: A 10 (7 hot hits, 3 misses); B 8 (the corrupt key's first miss included)
    assert c.value("infercache.lookups", model_version="A", outcome="hit", tier="hot") == 7
    assert c.value("infercache.lookups", model_version="A", outcome="miss") == 3
    assert c.value("infercache.lookups", model_version="A") == 10
    assert c.value("infercache.lookups", model_version="B", outcome="hit", tier="hot") == 1
    assert c.value("infercache.lookups", model_version="B", outcome="miss") == 5
    assert c.value("infercache.entries.rejected", model_version="B", reason="corrupt") == 1
    assert c.value("infercache.entries.rejected", model_version="A") == 0
    assert c.value("infercache.lookups", model_version="B", outcome="bypass") == 2
    assert c.value("infercache.lookups", model_version="B") == 8
    assert c.value("infercache.bypasses", model_version="B", reason="side_effects") == 2
    assert c.value("infercache.bypasses", model_version="A") == 0
    assert c.value("infercache.stores", model_version="A", result="stored") == 7
    assert c.value("infercache.stores", model_version="B", result="stored") == 1
    # Saved: 7 hits of A at 800 ms / 150 tokens each; B's hit had no cost.
    assert c.value("infercache.saved.latency", model_version="A") == pytest.approx(7 * 0.8)
    assert c.value("infercache.saved.tokens", model_version="A", kind="prompt") == 700
    assert c.value("infercache.saved.tokens", model_version="A", kind="completion") == 350
    assert c.value("infercache.saved.latency", model_version="B") == 0
    assert c.value("infercache.tier.entries", tier="hot") == 8
    # The same numbers in the domain counters GetStats serves.
    stats = c.running.cache.stats
    assert stats.total("lookups", version="A", outcome="hit") == 7
    assert stats.total("lookups", version="B", outcome="hit") == 1
    assert stats.total("rejected", version="B", reason="corrupt") == 1


async def test_spans_carry_the_attributes(captured: Captured) -> None:
    """One server span per RPC with outcome, tier, versions, hashed tenant and digest prefix."""
    c = captured
    await scripted_workload(c)
    k = _key("A", PROMPTS_A[0])
    hit = await c.client.lookup(k)
    spans = c.finished_spans()
    # 8 stores + 18 lookups in the workload, plus this one
    assert sorted({s.name for s in spans}) == [
        "infercache.v1.CacheService/Lookup",
        "infercache.v1.CacheService/Store",
    ]
    assert len(spans) == 8 + 18 + 1
    last = spans[-1]
    assert last.kind.name == "SERVER"
    attrs = dict(last.attributes or {})
    assert attrs["infercache.outcome"] == "hit"
    assert attrs["infercache.tier"] == "hot"
    assert attrs["infercache.model_version"] == "A"
    assert attrs["infercache.prompt_version"] == "p-v3"
    assert attrs["infercache.adapter_version"] == ""
    assert attrs["infercache.key_digest"] == hit.key_digest[:8].hex()
    tenant = attrs["infercache.tenant"]
    assert isinstance(tenant, str)
    assert len(tenant) == 16
    assert TENANT not in tenant
    assert attrs["rpc.grpc.status_code"] == 0
    misses = [s for s in spans if (s.attributes or {}).get("infercache.outcome") == "miss"]
    assert len(misses) == 3 + 5
    assert all((s.attributes or {}).get("infercache.tier") == "none" for s in misses)
    bypasses = [s for s in spans if (s.attributes or {}).get("infercache.outcome") == "bypass"]
    assert len(bypasses) == 2
    # Batch RPCs carry their size; failed RPCs their status.
    await c.client.lookup_batch([_key("A", t) for t in PROMPTS_A[:4]])
    batch = c.finished_spans()[-1]
    assert batch.name == "infercache.v1.CacheService/LookupBatch"
    assert (batch.attributes or {})["infercache.batch_size"] == 4
    assert (batch.attributes or {})["infercache.hits"] == 4
    before = len(c.finished_spans())
    with pytest.raises(grpc.aio.AioRpcError):
        await c.client.lookup(make_key(tenant="", model_version="A", prompt_version="p", text="x"))
    # An aborted RPC's status reaches the client before the server's handler unwinds.
    await eventually(lambda: len(c.finished_spans()) > before)
    failed = c.finished_spans()[-1]
    assert failed.status.status_code is StatusCode.ERROR
    assert "INVALID_ARGUMENT" in (failed.status.description or "")
    assert (failed.attributes or {})[
        "rpc.grpc.status_code"
    ] == grpc.StatusCode.INVALID_ARGUMENT.value[0]


async def test_rpc_durations_are_counted_per_method_and_code(captured: Captured) -> None:
    """Every RPC lands in the duration histogram under its method and status code."""
    c = captured
    await scripted_workload(c)
    with pytest.raises(grpc.aio.AioRpcError):
        await c.client.lookup(make_key(tenant="", model_version="A", prompt_version="p", text="x"))
    await eventually(lambda: ("Lookup", "INVALID_ARGUMENT") in c.running.rpc_stats.durations)
    durations = c.running.rpc_stats.snapshot()
    assert durations["Lookup", "OK"].count == 18
    assert durations["Store", "OK"].count == 8
    assert durations["Lookup", "INVALID_ARGUMENT"].count == 1
    assert sum(durations["Lookup", "OK"].buckets) == 18


async def test_no_prompt_text_in_spans_metrics_or_logs(captured: Captured) -> None:
    """No span attribute, metric label or log line contains the workload's prompt text."""
    c = captured
    await scripted_workload(c)
    await c.client.lookup_batch([_key("A", t) for t in PROMPTS_A])
    structlog.get_logger("test").warning("probe", text=PROMPTS_A[0], prompt=PROMPTS_B[0])
    # Everything the sidecar emitted, as text.
    emitted: list[str] = []
    for s in c.finished_spans():
        emitted.append(s.name)
        emitted += [f"{k}={v!s}" for k, v in (s.attributes or {}).items()]
        emitted += [e.name for e in s.events]
        emitted.append(str(s.status.description))
    data = c.metrics.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    emitted += [f"{k}={v!s}" for k, v in (p.attributes or {}).items()]
    lines = c.logs.getvalue().splitlines()
    emitted += lines
    assert lines, "no log line captured: the test would prove nothing"
    assert len(emitted) > 100, "too little captured: the test would prove nothing"
    blob = "\n".join(emitted)
    for text in (*PROMPTS_A, *PROMPTS_B, PAYLOAD.decode()):
        assert text not in blob
    # The logged events are there, with their request context, minus the prompt fields.
    events = [json.loads(line) for line in lines]
    rejected = [e for e in events if e["event"] == "entry_rejected"]
    assert len(rejected) == 1
    assert rejected[0]["rpc"] == "Lookup"
    assert rejected[0]["model_version"] == "B"
    assert len(rejected[0]["key_digest"]) == 16
    probe = next(e for e in events if e["event"] == "probe")
    assert "text" not in probe
    assert "prompt" not in probe


async def test_tenant_in_clear_when_configured(log_buffer: io.StringIO) -> None:
    """With tenants_in_clear the span's tenant attribute is the tenant itself."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=ALWAYS_ON)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(tracer_provider, tenants_in_clear=True, tracing=True)
    async with in_process_sidecar(telemetry=telemetry) as sc:
        await sc.client.lookup(_key("A", "q"))
    (span,) = spans.get_finished_spans()
    assert (span.attributes or {})["infercache.tenant"] == TENANT


async def test_kv_rpcs_get_spans_durations_and_metrics(captured: Captured) -> None:
    """KvCacheService RPCs are observed like the others, and the KV tier's counters export."""
    from infercache.v1 import kv_pb2, kv_pb2_grpc

    c = captured
    async with grpc.aio.insecure_channel(f"127.0.0.1:{c.running.ports[0]}") as channel:
        stub = kv_pb2_grpc.KvCacheServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.DetachHotTier(kv_pb2.DetachHotTierRequest(attachment_id="nope"), timeout=5)
    name = "infercache.v1.KvCacheService/DetachHotTier"
    await eventually(lambda: any(s.name == name for s in c.finished_spans()))
    (span,) = [s for s in c.finished_spans() if s.name == name]
    assert span.status.status_code is StatusCode.ERROR
    assert [k for k in c.running.rpc_stats.durations if k[0] == "DetachHotTier"]
    assert c.value("infercache.kv.events", event="lookups") == 0
    assert {a["event"] for a, _ in c.points("infercache.kv.events")} >= {
        "hit_blocks",
        "committed_blocks",
    }
