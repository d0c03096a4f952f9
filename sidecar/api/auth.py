"""Admin authentication: named bearer tokens, compared in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from sidecar.errors import Unauthenticated


class AdminAuth:
    """Maps an `authorization: Bearer <token>` header to the token's name."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = [(name, token.encode()) for name, token in sorted(tokens.items())]

    @property
    def enabled(self) -> bool:
        """False when no token is configured (then every admin call is refused)."""
        return bool(self._tokens)

    def caller(self, metadata: Iterable[tuple[str, str | bytes]]) -> str:
        """The authenticated caller's name; Unauthenticated otherwise."""
        header = next((v for k, v in metadata if k.lower() == "authorization"), None)
        if header is None:
            raise Unauthenticated("missing authorization metadata (Bearer token)")
        text = header.decode() if isinstance(header, bytes) else header
        scheme, _, presented = text.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise Unauthenticated("authorization must be 'Bearer <token>'")
        candidate = presented.strip().encode()
        found = ""
        # Compare against every token so timing does not reveal which name matched.
        for name, token in self._tokens:
            if hmac.compare_digest(candidate, token) and not found:
                found = name
        if not found:
            raise Unauthenticated("invalid admin token")
        return found
