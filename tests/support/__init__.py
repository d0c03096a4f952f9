"""What tests share: server processes, sidecars, keys, fakes, checkpoints, strategies."""
