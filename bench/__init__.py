"""Benchmarks of the sidecar, each run as `python -m bench.<name>` from the repository root.

lookup (hit paths against a bare gRPC echo server), telemetry (telemetry on vs off),
invalidate (Invalidate latency against entry count; what the freshness check costs a
hot hit), kv (the KV hot tier against raw redis-py), fingerprint (what each way of
identifying a model's weights notices and costs), hit_recording and policy (what
recording hits and the cacheability policy cost a hot hit, in process). Each prints
ratios against a baseline measured in the same run and ends with one `key=value` line;
`--smoke` runs each in a few seconds, and `python -m bench.smoke` runs every smoke mode.
"""
