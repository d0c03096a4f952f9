"""KV events: the sidecar publishes what its pool and warm tier hold in vLLM's KV event
schema (builder.py: pure; recorder.py: per event-loop turn; publisher.py: ZMQ)."""
