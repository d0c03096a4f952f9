"""The floor under any gateway on this stack: a forwarder with no cache, no keys and no
checks, on the same HTTP server (uvicorn + httptools, uvloop) and upstream client
(aiohttp) as infercache's gateway. Its miss overhead over direct calls is what the stack
itself costs; the gateway's figure minus this one is what caching adds.

    python -m bench.gateway.bare_proxy PORT UPSTREAM_URL
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
import uvicorn

Message = MutableMapping[str, Any]


class BareProxy:
    """POST bodies forwarded to the upstream as they are; answers passed back piece by piece."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

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
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        url = self.upstream + scope["path"]
        async with self.session.post(url, data=b"".join(parts), headers=headers) as resp:
            kind = resp.headers.get("content-type", "application/json").encode("latin-1")
            start = {"type": "http.response.start", "status": resp.status}
            await send(start | {"headers": [(b"content-type", kind)]})
            async for piece in resp.content.iter_any():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def main() -> None:
    """Serve on 127.0.0.1:PORT in front of UPSTREAM_URL."""
    port, upstream = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(
        BareProxy(upstream),
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
