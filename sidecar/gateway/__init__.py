"""The OpenAI-compatible caching gateway: unmodified OpenAI clients get safe caching.

Served in the sidecar's own process and event loop (`--gateway-listen`), calling the
ResultCache directly. The only package that imports the HTTP stack (uvicorn, ASGI);
docs/gateway.md describes the behaviour, docs/keys.md the request fields it keys on.
"""
