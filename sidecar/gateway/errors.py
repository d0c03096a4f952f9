"""HTTP errors of the gateway, answered as OpenAI-style error bodies.

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

Every refusal of a caller's mistake is a 4xx naming what was wrong; domain errors
(sidecar.errors) are mapped to statuses in one table, `for_domain`.
"""

from __future__ import annotations

import json
import re

from sidecar.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InfercacheError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
)
from sidecar.wire.errors import WireError


class HttpError(Exception):
    """An answer the gateway gives instead of a completion."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or []
        """Response headers the answer needs (Allow on a 405)."""
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def body(self) -> bytes:
        """The OpenAI-style JSON error body."""
        doc = {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }
        return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def for_wire(exc: WireError) -> HttpError:
    """The 400 answering a body the wire package refused (its field and code kept)."""
    return HttpError(400, exc.message, param=exc.field or None, code=exc.code)


def bad_request(param: str, problem: str) -> HttpError:
    """400 naming the body field (dotted path) that is wrong."""
    return HttpError(400, f"{param}: {problem}", param=param, code="invalid_value")


def bad_header(name: str, problem: str) -> HttpError:
    """400 naming the request header that is wrong."""
    return HttpError(400, f"{name}: {problem}", param=name.lower(), code="invalid_header")


_BRACKETED = re.compile(r"^logit_bias\[(.*)\]$")


def body_param(field: str, input_name: str) -> str:
    """The body field a key field's error names (key.sampling.seed -> seed,
    key.output.dimensions -> dimensions, chat.messages[0].name -> messages[0].name,
    token_ids -> the endpoint's input,
    logit_bias[5] -> logit_bias.5, the dotted form the gateway's own 400s use)."""
    param = field.removeprefix("key.").removeprefix("sampling.").removeprefix("output.")
    param = param.removeprefix("chat.")  # chat.messages[0].name -> messages[0].name
    if param.split(".", 1)[0] in ("token_ids", "text", "chat"):
        return input_name
    return _BRACKETED.sub(r"logit_bias.\1", param)


def for_domain(exc: InfercacheError, input_name: str = "input") -> HttpError:
    """The HTTP answer to a domain error raised while serving a request (`input_name`:
    the body field holding the endpoint's input, named when the key's input is wrong)."""
    if isinstance(exc, WireError):
        return for_wire(exc)
    if isinstance(exc, InvalidArgument):
        param = body_param(exc.field, input_name)
        # A problem may quote the value: a 300-digit number is cut, not echoed whole.
        problem = exc.problem if len(exc.problem) <= 200 else exc.problem[:200] + "..."
        return HttpError(400, f"{param}: {problem}", param=param, code="invalid_value")
    if isinstance(exc, Unauthenticated):
        return HttpError(401, str(exc), kind="authentication_error", code="invalid_api_key")
    if isinstance(exc, NotFound):
        return HttpError(404, str(exc), code="not_found")
    if isinstance(exc, FailedPrecondition):
        return HttpError(409, str(exc), code="failed_precondition")
    if isinstance(exc, ResourceExhausted):
        return HttpError(429, str(exc), kind="rate_limit_error", code="resource_exhausted")
    if isinstance(exc, DeadlineExceeded):
        return HttpError(504, str(exc), kind="timeout_error", code="deadline_exceeded")
    return HttpError(503, str(exc), kind="server_error", code="unavailable")
