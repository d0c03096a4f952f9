"""The model server behind the gateway (OpenAI-compatible HTTP), through one pooled aiohttp
client session: each call bounded by the caller's overall deadline, failures mapped to
502 / 504.

Why aiohttp's client and not httpx (which prewarm uses): the gateway forwards every miss,
and its goal is <= 1 ms of overhead per miss. Measured here (one POST of a chat body to a
uvicorn upstream over loopback, 2,000 calls, client CPU per call): httpx 0.75-0.9 ms at
one connection and 1.3-1.7 ms at 16 (its pool's bookkeeping grows with the connections),
raw httpcore 0.5-1.6 ms, aiohttp 0.10-0.16 ms (docs/benchmarks.md, gateway).

Bodies are asked for uncompressed (`Accept-Encoding: identity`): the gateway forwards and
stores the bytes as they come, so an upstream that compresses anyway is decoded here
(gzip, deflate) and one whose encoding cannot be decoded is a 502, never bytes passed on
without the header that says how to read them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from sidecar.gateway.errors import HttpError

_DECODED = frozenset({"", "identity", "gzip", "x-gzip", "deflate"})


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """An open upstream response: its status, content type and body as it arrives."""

    status: int
    content_type: str
    _response: aiohttp.ClientResponse

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives (decoded if it came compressed)."""
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except (aiohttp.ClientError, ValueError) as exc:
            # Cut off, malformed framing or a bad compressed stream.
            raise _unreachable(exc) from exc

    def ended(self) -> bool:
        """Whether the body has arrived whole: the piece `pieces` gave last was its end.

        aiohttp marks the end only when the framing says so (Content-Length reached, the
        last chunk, a close-delimited body closed, a compressed stream complete); a body
        cut off sets an error instead, which `pieces` raises. A caller can then send the
        last piece as the end of its own response: one write to the client, not two.
        """
        return self._response.content.at_eof()


class Upstream:
    """Pooled connections to the model server at `base_url`."""

    def __init__(
        self, base_url: str, *, timeout_s: float, max_connections: int, api_key: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._max_connections = max_connections
        self._headers = CIMultiDict({"accept-encoding": "identity", "accept": "*/*"})
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._urls: dict[str, URL] = {}
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections, limit_per_host=0, keepalive_timeout=30
                ),
                # Connecting must be quick; the answer itself may take the whole deadline
                # (the caller's asyncio.timeout bounds the call as a whole). No sock_read:
                # a gap between reads as long as the whole deadline never ends a call
                # before that deadline does, and aiohttp re-arms its timer on every read.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, self.timeout_s)),
                headers=self._headers,
                skip_auto_headers=("User-Agent",),
                auto_decompress=True,
                raise_for_status=False,
            )
        return self._session

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base_url + path)
        return url

    @asynccontextmanager
    async def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> AsyncIterator[UpstreamReply]:
        """An open response to one request; HttpError 502/504 on failure.

        The caller reads it (`pieces`) inside the block and bounds the whole call with
        `timeout_s`. Leaving the block early (an error, a client gone) closes the
        connection instead of returning a half-read one to the pool.
        """
        headers = {"content-type": "application/json"} if body is not None else None
        try:
            response = await self._client().request(
                method, self._url(path), data=body, headers=headers, allow_redirects=False
            )
        except aiohttp.ServerTimeoutError as exc:
            raise _timeout(self.timeout_s) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _unreachable(exc) from exc
        complete = False
        try:
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if encoding not in _DECODED:
                raise HttpError(
                    502,
                    f"the model server answered in an encoding the gateway cannot read: {encoding}",
                    kind="server_error",
                    code="upstream_encoding",
                )
            kind = response.headers.get("content-type", "application/json")
            yield UpstreamReply(response.status, kind, response)
            complete = True
        except aiohttp.ServerTimeoutError as exc:
            raise _timeout(self.timeout_s) from exc
        finally:
            if complete:
                response.release()
            else:
                response.close()

    async def close(self) -> None:
        """Close the pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _timeout(timeout_s: float) -> HttpError:
    return HttpError(
        504,
        f"the model server did not answer within {timeout_s:g} s "
        "(INFERCACHE_GATEWAY_UPSTREAM_TIMEOUT_S)",
        kind="timeout_error",
        code="upstream_timeout",
    )


def _unreachable(exc: BaseException) -> HttpError:
    return HttpError(
        502,
        f"the model server could not be reached: {type(exc).__name__}",
        kind="server_error",
        code="upstream_unreachable",
    )
