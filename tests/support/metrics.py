"""Counters a sidecar exports on /metrics, as a test reads them."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.sidecars import SidecarProcess


def event_counters(proc: SidecarProcess, family: str) -> dict[str, float]:
    """`<family>_total` by its `event` label (e.g. family "infercache_kv_events"),
    scraped from the sidecar's /metrics (started with metrics=True)."""
    url = f"http://127.0.0.1:{proc.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        s.labels["event"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
        if s.name.endswith("_total")
    }
