"""deploy/grafana/infercache.json parses, and every query names a metric a sidecar exports
(scraped from a real sidecar's /metrics over HTTP, every metric family populated)."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from infercache_client import make_key
from prometheus_client.parser import text_string_to_metric_families

from sidecar.observability.stats import CacheStats
from tests.support.sidecars import StartSidecar

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "infercache.json"
METRIC = re.compile(r"\binfercache_[a-z_]+\b")


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"])
    return exprs


def _populate(stats: CacheStats) -> None:
    """One event in every counter family (the hooks other parts of the sidecar call)."""
    stats.count_bypass("fp-1", "side_effects")
    stats.count_downstream("fp-1", "rejected", "toxicity")
    stats.count_invalidation("fp-1")
    stats.count_rejected("fp-1", "corrupt")
    stats.count_dead("fp-1")
    stats.count_lease("fp-1", "waited")
    stats.count_store("fp-1", "failed", "warm_write")
    stats.count_hit_saving("fp-1", "hot", 900, 10, 20)
    stats.degraded[stats.version("fp-1")] += 1


def _scrape(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


async def test_every_dashboard_query_names_an_exported_metric(
    start_sidecar: StartSidecar,
) -> None:
    """Each expression's infercache_* names appear among the samples /metrics serves."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["title"] == "infercache"
    exprs = _queries(dashboard)
    assert len(exprs) >= 15
    sidecar = await start_sidecar(metrics_listen="127.0.0.1:0")
    port = sidecar.running.metrics_port
    assert port
    k = make_key(tenant="t", model_version="fp-1", prompt_version="p", text="q")
    miss = await sidecar.client.lookup(k)
    await sidecar.client.store(k, b"a", lease=miss.lease)
    await sidecar.client.lookup(k)
    _populate(sidecar.stats)
    exported = await asyncio.to_thread(_scrape, port)
    used: set[str] = set()
    for expr in exprs:
        names = set(METRIC.findall(expr))
        assert names, f"query names no infercache metric: {expr}"
        used |= names
        assert names <= exported, f"{sorted(names - exported)} not exported; query: {expr}"
    # The dashboard covers the list: versions, refusals, failures, savings, memory.
    for needed in (
        "infercache_lookups_total",
        "infercache_bypasses_total",
        "infercache_stores_total",
        "infercache_warm_errors_total",
        "infercache_entries_rejected_total",
        "infercache_downstream_total",
        "infercache_saved_latency_seconds_total",
        "infercache_saved_tokens_total",
        "infercache_tier_bytes",
    ):
        assert needed in used, needed
