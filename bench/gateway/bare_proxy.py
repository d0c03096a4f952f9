"""The floor under any gateway on this stack: a forwarder with no cache, no keys and no
checks, on the same HTTP server (uvicorn + httptools, uvloop) and upstream client
(sidecar/gateway/upstream.py) as infercache's gateway. Its miss overhead over direct
calls is what the stack itself costs; the gateway's figure minus this one is what
caching adds.

    python -m bench.gateway.bare_proxy PORT UPSTREAM_URL
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from sidecar.gateway.upstream import Upstream

Message = MutableMapping[str, Any]


class BareProxy:
    """POST bodies forwarded to the upstream as they are; answers passed back piece by piece."""

    def __init__(self, upstream: str) -> None:
        self.upstream = Upstream(upstream, timeout_s=600, max_connections=256)

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        async with self.upstream.call("POST", scope["path"], b"".join(parts)) as resp:
            kind = resp.content_type.encode("latin-1")
            start = {"type": "http.response.start", "status": resp.status}
            await send(start | {"headers": [(b"content-type", kind)]})
            async for piece in resp.pieces():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def serve_on_the_gateways_stack(app: Any, port: int) -> None:
    """Run an ASGI app on 127.0.0.1:`port` with the gateway's HTTP stack (uvicorn,
    httptools, uvloop), as the bench's floors are measured."""
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )


def main() -> None:
    """Serve on 127.0.0.1:PORT in front of UPSTREAM_URL."""
    port, upstream = int(sys.argv[1]), sys.argv[2]
    serve_on_the_gateways_stack(BareProxy(upstream), port)


if __name__ == "__main__":
    main()
