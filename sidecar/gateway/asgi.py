"""The gateway's HTTP surface as an ASGI application (served by uvicorn, see service.py).

Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses,
/v1/messages (Anthropic's Messages API: its refusals in Anthropic's error form); GET
/v1/models
(proxied); GET /health. A request head over its limit is 431; credentials are checked
before the body is read; a body over the limit is 413 without being read whole, and
one that does not arrive whole within its deadline is 408 (both close the connection:
what is left of the body is not read as a next request). While a request is served, a watcher
waits for the client to go away and then cancels it (and the upstream call with it),
unless the client already has the whole response. An HTTP/1.0 request is answered
without chunked framing (http10.py); one the server's shutdown cuts before its response
started is a 503 to retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog

from sidecar.gateway.anthropic_errors import anthropic_error
from sidecar.gateway.body import check_framing
from sidecar.gateway.errors import HttpError
from sidecar.gateway.flow import Flow
from sidecar.gateway.headers import SINGLE_HEADERS, request_headers
from sidecar.gateway.http10 import HTTP_10, HeldReply
from sidecar.gateway.inline import Resumed, first_step
from sidecar.gateway.reply import JSON, Headers, Reply
from sidecar.wire.anthropic.keys import MESSAGES, MESSAGES_PATH

log = structlog.get_logger("infercache.gateway")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
    MESSAGES_PATH: MESSAGES,
}
MODELS_PATH = "/v1/models"
_ALLOW_POST = b"POST, OPTIONS"
_ALLOW_GET = {MODELS_PATH: b"GET, HEAD, OPTIONS", "/health": b"GET, HEAD, OPTIONS"}
"""The Allow header of each route (HEAD is answered as GET; uvicorn drops the body)."""
_METHODS = {a: frozenset(a.decode().split(", ")) for a in (_ALLOW_POST, *_ALLOW_GET.values())}
"""The methods each Allow header names."""


_CLOSE: Headers = [(b"connection", b"close")]


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """What a request may send (INFERCACHE_GATEWAY_MAX_BODY_BYTES, _BODY_TIMEOUT_S,
    _MAX_HEADER_BYTES)."""

    max_body_bytes: int
    body_timeout_s: float
    max_header_bytes: int


class GatewayApp:
    """The ASGI callable."""

    def __init__(self, flow: Flow, limits: BodyLimits) -> None:
        self.flow = flow
        self.limits = limits
        tenant_header = flow.api_keys.tenant_header
        self.single_headers = SINGLE_HEADERS | ({tenant_header} if tenant_header else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        reply = _reply(send, scope, self.flow.settings.max_payload_bytes)
        anthropic = scope.get("path", "").startswith(MESSAGES_PATH)
        try:
            await self._route(scope, receive, reply)
        except HttpError as exc:
            await _error(reply, exc, anthropic)
        except _ClientGone:
            return
        except asyncio.CancelledError:
            # Only the server's shutdown cancels from outside (a client gone is taken
            # back in _until_disconnect): the request outlived the grace period. Answered
            # with a status to retry by when none went out yet, not uvicorn's plain-text
            # 500; a response under way is left unfinished as after any late failure.
            # Not raised on: nobody awaits this task, and uvicorn would log a traceback.
            log.info("gateway_cut_at_shutdown", path=scope.get("path"), started=reply.started)
            await _error(reply, _shutting_down(), anthropic)
        except TimeoutError:
            timeout_s = self.flow.upstream.timeout_s
            await _error(
                reply,
                HttpError(
                    504,
                    f"the model server did not answer within {timeout_s:g} s "
                    "(INFERCACHE_GATEWAY_UPSTREAM_TIMEOUT_S)",
                    kind="timeout_error",
                    code="upstream_timeout",
                ),
                anthropic,
            )
        except Exception as exc:
            log.exception("gateway_internal_error", path=scope.get("path"))
            await _error(
                reply,
                HttpError(
                    500, f"internal error: {type(exc).__name__}", kind="server_error", code=None
                ),
                anthropic,
            )

    async def _route(self, scope: Scope, receive: Receive, reply: Reply) -> None:
        path, method = scope["path"], scope["method"]
        if sum(len(k) + len(v) for k, v in scope["headers"]) > self.limits.max_header_bytes:
            raise HttpError(
                431,
                f"the request headers are larger than {self.limits.max_header_bytes} bytes "
                "(INFERCACHE_GATEWAY_MAX_HEADER_BYTES)",
                code="request_header_fields_too_large",
                headers=_CLOSE,
            )
        endpoint = ENDPOINTS.get(path)
        allowed = _ALLOW_POST if endpoint is not None else _ALLOW_GET.get(path)
        if allowed is None:
            raise HttpError(404, f"no route {method} {path}", code="not_found")
        if method == "OPTIONS":
            await reply.whole(204, [(b"allow", allowed)], b"")
            return
        if method not in _METHODS[allowed]:
            raise HttpError(
                405,
                f"{path} takes {allowed.decode()}",
                code="method_not_allowed",
                headers=[(b"allow", allowed)],
            )
        if path == "/health":
            await reply.whole(200, [(b"content-type", JSON)], b'{"status":"ok"}')
            return
        headers = request_headers(scope["headers"], self.single_headers)
        tenant = self.flow.tenant(headers, endpoint)
        if endpoint is None:
            await _until_disconnect(self.flow.models(reply), receive, reply)
            return
        check_framing(headers)
        raw = await _read_body(receive, headers, self.limits)
        work = self.flow.completion(endpoint, tenant, headers, raw, reply)
        await _until_disconnect(work, receive, reply)


def _reply(send: Send, scope: Scope, hold_cap: int) -> Reply:
    """The Reply writing through `send`; for an HTTP/1.0 request one that never needs
    chunked framing (http10.py), holding whole answers up to `hold_cap` bytes."""

    async def start(status: int, headers: Headers) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(data: bytes, more: bool) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": more})

    if scope.get("http_version") == HTTP_10:
        return HeldReply(start, body, hold_cap)
    return Reply(start, body)


async def _error(reply: Reply, exc: HttpError, anthropic: bool = False) -> None:
    if reply.started and not reply.retract():
        # Too late for a status. The response is left unfinished, so uvicorn closes the
        # connection without the final chunk: a client sees a broken response (the SDKs
        # raise), never a clean end of a truncated body or of a stream without [DONE].
        log.info("gateway_error_after_start", status=exc.status, error=exc.message)
        return
    headers: Headers = [(b"content-type", JSON), *exc.headers]
    if exc.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    status, body = anthropic_error(exc) if anthropic else (exc.status, exc.body())
    await reply.whole(status, headers, body)


def _shutting_down() -> HttpError:
    return HttpError(
        503,
        "the gateway is shutting down and cut this request at the end of its grace "
        "period (INFERCACHE_GRACE_PERIOD_S): send it again",
        kind="server_error",
        code="shutting_down",
        headers=[(b"retry-after", b"1"), *_CLOSE],
    )


class _ClientGone(Exception):
    """The client went away before its request body arrived: nobody is left to answer."""


async def _read_body(receive: Receive, headers: dict[bytes, bytes], limits: BodyLimits) -> bytes:
    limit = limits.max_body_bytes
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    # The deadline runs from here; it is armed only at a receive that waits (inline.py):
    # a body that came with the head (most do) is read without a timer.
    deadline = asyncio.get_running_loop().time() + limits.body_timeout_s
    while True:
        ended, message = first_step(receive())
        if not ended:
            message = await _by_deadline(message, deadline, limits)
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _by_deadline(rest: Resumed, deadline: float, limits: BodyLimits) -> Message:
    """The rest of a receive that waits, by the body's deadline (408 past it)."""
    try:
        async with asyncio.timeout_at(deadline):
            message: Message = await rest
            return message
    except TimeoutError:
        raise HttpError(
            408,
            f"the body did not arrive within {limits.body_timeout_s:g} s "
            "(INFERCACHE_GATEWAY_BODY_TIMEOUT_S)",
            code="request_timeout",
            headers=_CLOSE,
        ) from None


def _too_large(limit: int) -> HttpError:
    return HttpError(
        413,
        f"the body is larger than {limit} bytes (INFERCACHE_GATEWAY_MAX_BODY_BYTES)",
        code="request_too_large",
        headers=_CLOSE,
    )


async def _until_disconnect(work: Awaitable[None], receive: Receive, reply: Reply) -> None:
    """Run `work`; cancel it if the client disconnects before the response is complete.

    Once the last byte is out, ASGI's receive says "disconnect" too (uvicorn's does,
    whether the client stays or not): what follows the response, the store of a complete
    answer, is not cancelled then, however long the warm tier takes. Nor once a stream's
    `data: [DONE]` is out (`reply.answered`): the OpenAI SDKs close the connection on
    [DONE], often before the model server has ended its response; the rest is read and
    the answer stored as if the client had stayed.

    The work runs in the request's own task, only the watcher beside it (not a task of
    its own plus asyncio.wait), and the watcher only once the work waits (inline.py): a
    hit from memory never does, and no disconnect could be acted on before a wait. The
    watcher's cancellation is taken back (`uncancel`) once it has ended the work, as
    asyncio.timeout does, so a cancellation from anyone else (a server shutdown) still
    propagates.
    """
    ended, rest = first_step(work)
    if ended:
        return  # it never waited: there was no moment at which it could have been cut
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        if not (reply.finished or reply.answered):
            gone = True
            task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        await rest
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            return  # ours: the client went away
        raise
    finally:
        if watcher.done():
            watcher.result()  # receive's own error, if it failed
        else:
            watcher.cancel()
    if gone:
        # The work ended by itself before the cancellation reached it: take that back,
        # or it would hit whatever this task awaits next.
        task.uncancel()
