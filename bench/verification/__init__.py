"""Shadow verification: drift detection, false quarantines under natural noise, what
it costs upstream and on a hit's latency (docs/benchmarks.md, verification)."""
