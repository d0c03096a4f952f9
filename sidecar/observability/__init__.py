"""Observability: per-version counters, OTel metrics and traces, tier usage, logs."""
