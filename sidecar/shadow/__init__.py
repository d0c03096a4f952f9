"""Shadow calls: re-compute a sample of hits (and of misses, for the engine's own
baseline) at the model server off the client's path, compare the answers and feed the
verdicts to sidecar/verification."""
