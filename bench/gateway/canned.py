"""The floor under a gateway's hit: a server that answers every POST with one fixed
chat-completions body, on the gateway's own HTTP stack (uvicorn + httptools, uvloop), with
no cache, no keys and no checks. The gateway's hit RPS over this one's, measured in the
same run by the same load generator, is what its hit path costs beyond the stack.

    python -m bench.gateway.canned PORT BODY_FILE
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from bench.gateway.bare_proxy import serve_on_the_gateways_stack

Message = MutableMapping[str, Any]


class Canned:
    """Reads each request's body (as the gateway must) and answers `body` as JSON."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.start: Message = {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send(self.start)
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def main() -> None:
    """Serve on 127.0.0.1:PORT, answering the bytes of BODY_FILE."""
    port, body = int(sys.argv[1]), Path(sys.argv[2]).read_bytes()
    serve_on_the_gateways_stack(Canned(body), port)


if __name__ == "__main__":
    main()
