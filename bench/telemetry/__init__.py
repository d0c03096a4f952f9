"""Telemetry cost benchmark: what telemetry costs a hot hit.

Four sidecars (each `python -m sidecar serve`, embedded store, the same 256 stored 1 KiB
results) and an OTLP/gRPC trace sink process, all started by `python -m bench.telemetry`:

- sidecar-hot: telemetry off (the baseline);
- sidecar-metrics: /metrics on (a free port) and scraped every 5 s by the bench;
- sidecar-traced: as metrics, plus every span exported over OTLP to the sink;
- sidecar-sampled: as traced, spans sampled at 1% (parentbased_traceidratio 0.01).

One client worker drives hot-hit Lookups (concurrency 16) in 0.25 s slices interleaved
across the four (odd rounds in reverse), so adjacent slices see the same machine; the
ratio of two sidecars within a round stays steady where absolute rates swing. In process,
it also times what RpcObserver adds per RPC around a trivial handler.

The last line holds telemetry_cost= (RPC/s off / on, everything on),
telemetry_cost_metrics= and telemetry_cost_sampled= (medians of the per-round ratios).

    .venv/bin/python -m bench.telemetry            # 150 rounds, about 3.5 min
    .venv/bin/python -m bench.telemetry --smoke    # 3 rounds of 0.1 s slices, seconds
"""
