"""A completion request's body: as the client sent it, and as the model server gets it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.wire.json_body import parse_body
from sidecar.wire.openai.cache_salt import TenantSalts


class Body:
    """A request body as the client sent it (what is keyed and recorded for prewarm)
    and as the model server gets it (with the tenant's cache_salt): the latter made
    only when the request is forwarded, never for a hit. `doc` is the parsed body, None
    where it was not parsed (a request keyed before: parsed when forwarded)."""

    __slots__ = ("_doc", "_endpoint", "_salts", "_sent", "_tenant", "raw")

    def __init__(
        self,
        raw: bytes,
        doc: Mapping[str, Any] | None,
        endpoint: str,
        tenant: str,
        salts: TenantSalts | None,
    ) -> None:
        self.raw = raw
        self._doc, self._endpoint, self._tenant, self._salts = doc, endpoint, tenant, salts
        self._sent: bytes | None = None

    @property
    def sent(self) -> bytes:
        """The bytes to send the model server."""
        if self._sent is None:
            salts = self._salts
            if salts is None:
                self._sent = self.raw
            else:
                # A request keyed before (request_keys.py) comes without its parse.
                doc = parse_body(self.raw) if self._doc is None else self._doc
                self._sent = salts.body_for(self._endpoint, self._tenant, doc, self.raw)
        return self._sent
