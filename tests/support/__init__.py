"""What tests share (never a test module or a conftest): server processes, sidecars,
keys, checkpoints, strategies and the tiny KV model. The fakes downstream users want
too (Clock, FlakyWarmTier, an in-process sidecar) are public in sidecar.testing."""
