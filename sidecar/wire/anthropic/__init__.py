"""The Anthropic Messages API (`POST /v1/messages`, as vLLM serves it): key a request
body, judge and renew a whole answer, follow and replay its event stream (no I/O)."""
