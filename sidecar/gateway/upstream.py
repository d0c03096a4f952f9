"""The model server behind the gateway (OpenAI-compatible HTTP), through one pooled httpx
client: every call bounded by one overall deadline, failures mapped to 502 / 504."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from sidecar.gateway.errors import HttpError

# Hop-by-hop and framing headers are the gateway's own business on each leg.
_DROPPED = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"server", b"date"}
)


class Upstream:
    """Pooled connections to the model server at `base_url`."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_connections: int,
        api_key: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            # Connecting must be quick; the answer itself may take the whole deadline.
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            headers=headers,
            transport=transport,
            follow_redirects=False,
        )

    @asynccontextmanager
    async def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> AsyncIterator[httpx.Response]:
        """An open (streaming) response to one request; HttpError 502/504 on failure.

        The caller reads it (`aiter_raw`) inside the block and bounds the whole read
        with `timeout_s` (httpx's own timeouts are per read).
        """
        headers = {"content-type": "application/json"} if body is not None else {}
        request = self._client.build_request(method, path, content=body, headers=headers)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _timeout(self.timeout_s) from exc
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc
        try:
            yield response
        except httpx.TimeoutException as exc:
            raise _timeout(self.timeout_s) from exc
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc
        finally:
            await response.aclose()

    async def close(self) -> None:
        """Close the pool."""
        await self._client.aclose()


def passed_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    """The upstream response's headers the gateway passes on (end-to-end ones only)."""
    return [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in _DROPPED]


def _timeout(timeout_s: float) -> HttpError:
    return HttpError(
        504,
        f"the model server did not answer within {timeout_s:g} s",
        kind="timeout_error",
        code="upstream_timeout",
    )


def _unreachable(exc: Exception) -> HttpError:
    return HttpError(
        502,
        f"the model server could not be reached: {type(exc).__name__}",
        kind="server_error",
        code="upstream_unreachable",
    )
