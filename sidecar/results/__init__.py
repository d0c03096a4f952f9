"""The result cache: lookup and store, leases, chunked entries, replay pacing, feedback."""
