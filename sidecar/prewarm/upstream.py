"""The pod's model server over its OpenAI-compatible HTTP API (httpx).

Every failure becomes an UpstreamFailure with a short `reason` label (used as a
progress counter key) and a detail; nothing else escapes. A call is bounded by
one overall deadline (httpx's own timeouts are per read/write, so a server that
trickles bytes could otherwise hold a call forever) and by a response size cap.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import httpx

from sidecar.wire.openai.answers import Received, UpstreamCall

MODELS_PATH = "/v1/models"


class UpstreamFailure(Exception):
    """The model server did not give a usable answer; `reason` is a short label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ModelServer(Protocol):
    """What a prewarm run needs from the model server."""

    async def served_models(self) -> list[str]:
        """Ids listed by GET /v1/models."""
        ...

    async def complete(self, call: UpstreamCall) -> Received:
        """POST the call and return a 2xx answer (its bytes as they arrived)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class HttpModelServer:
    """ModelServer over httpx with a connection cap, a deadline and a size cap per call."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_connections: int,
        max_response_bytes: int,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._max_response_bytes = max_response_bytes
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            transport=transport,
            # The base URL is configured by the operator; never follow it elsewhere.
            follow_redirects=False,
            # The model server's own key (vLLM --api-key), as the gateway sends it.
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        )

    def _url(self, path: str) -> httpx.URL:
        """`path` under the base URL; UpstreamFailure unless it stays on its origin.

        httpx would send an absolute URL (or `//host/...`) as it is, whatever the base:
        the path must be a plain absolute path, and the result must have the base's
        scheme, host and port (the model server's key is sent with every request)."""
        if (
            not path.startswith("/")
            or path.startswith("//")
            or any(c in path for c in "@\\?#%")
            or any(ord(c) < 0x21 or ord(c) == 0x7F for c in path)
            or "/../" in path + "/"
            or "/./" in path + "/"
        ):
            raise UpstreamFailure("bad_path", f"{path[:64]!r} is not a plain path")
        url = httpx.URL(self.base_url + path)
        base = httpx.URL(self.base_url)
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise UpstreamFailure("bad_path", f"{path[:64]!r} leaves the model server")
        return url

    @asynccontextmanager
    async def _failures(self) -> AsyncIterator[None]:
        """Map httpx errors and the overall deadline to UpstreamFailure (the one place)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                yield
        except TimeoutError as exc:
            raise UpstreamFailure(
                "upstream_timeout", f"no complete answer within {self._timeout_s:g} s"
            ) from exc
        except httpx.TimeoutException as exc:
            raise UpstreamFailure("upstream_timeout", type(exc).__name__) from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
            raise UpstreamFailure("upstream_unreachable", f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamFailure("upstream_error", f"{type(exc).__name__}: {exc}") from exc

    async def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = ""
    ) -> Received:
        headers = {"content-type": content_type} if content_type else None
        url = self._url(path)
        stream = self._client.stream(method, url, content=body, headers=headers)
        t0 = time.monotonic()
        async with self._failures(), stream as resp:
            # Each piece with its arrival time: a streamed answer keeps its pacing.
            pieces: list[tuple[int, bytes]] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max_response_bytes:
                    raise UpstreamFailure(
                        "upstream_response_too_large",
                        f"more than {self._max_response_bytes} bytes",
                    )
                pieces.append((int((time.monotonic() - t0) * 1000), chunk))
            received = Received(resp.headers.get("content-type", ""), tuple(pieces))
            if not 200 <= resp.status_code < 300:
                raise UpstreamFailure(
                    f"upstream_http_{resp.status_code}",
                    received.body[:200].decode("utf-8", errors="replace"),
                )
            return received

    async def served_models(self) -> list[str]:
        """Ids of GET /v1/models ({"data": [{"id": ...}, ...]})."""
        received = await self._request("GET", MODELS_PATH)
        try:
            doc = json.loads(received.body)
            return [str(m["id"]) for m in doc["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamFailure(
                "upstream_bad_response", f"{MODELS_PATH} is not a model list"
            ) from exc

    async def complete(self, call: UpstreamCall) -> Received:
        """POST the completion request, its body as given."""
        return await self._request("POST", call.path, call.body, call.content_type)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
