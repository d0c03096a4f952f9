"""Shadow verification of hits: sampling, the engine's own divergence baseline, the
excess-divergence statistics, the budget and the quarantine it triggers (pure domain;
the calls themselves are sidecar/shadow)."""
