"""The result cache: lookup and store, single flight and leases, lookup observers, chunked
entries, replay pacing, feedback, and the stored forms of OpenAI answers (SSE streams,
whole bodies)."""
