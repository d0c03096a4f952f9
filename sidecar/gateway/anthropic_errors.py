"""The gateway's refusals on the Messages API, as Anthropic writes them:

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}

Every HttpError raised while serving `/v1/messages` (auth, framing, body, key, upstream
timeout) is answered in this form instead of OpenAI's. The status keeps its meaning;
the error type is Anthropic's for it (anthropic SDK, types/shared/error_type.py), and
a 503 (the cache's own dependencies unavailable) is Anthropic's 529 overloaded_error,
which Anthropic's SDKs retry as they retry a 503.
"""

from __future__ import annotations

import json

from sidecar.gateway.errors import HttpError

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error type of each status it uses."""
STATUSES = {503: 529}
"""Statuses Anthropic spells otherwise."""


def anthropic_error(exc: HttpError) -> tuple[int, bytes]:
    """(status, body) answering `exc` on the Messages API."""
    status = STATUSES.get(exc.status, exc.status)
    kind = TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    doc = {"type": "error", "error": {"type": kind, "message": exc.message}}
    return status, json.dumps(doc, ensure_ascii=False).encode("utf-8")
