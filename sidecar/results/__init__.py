"""The result cache: lookup and store, single flight and leases, lookup observers, chunked
entries, replay pacing, feedback (the OpenAI forms an answer is stored in are sidecar.wire)."""
