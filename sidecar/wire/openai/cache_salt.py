"""Each tenant's own `cache_salt`, added to every body sent to the model server.

vLLM shares its prefix cache (and a KV connector's blocks) between requests whose
prompts share a prefix, unless their `cache_salt` differs. Without a salt, one tenant
can time another's prompts (a prefix that is already cached answers faster), and the
connector's blocks spread that fleet-wide. So the gateway, and prewarm replaying what
the gateway recorded, send each tenant's requests with a salt derived from the tenant
under a secret key: never the raw tenant name (which would tell the model server, its
logs and its KV events who is asking), stable across sidecars of one fleet (the key is
derived from the fleet secret, so the warm tier's blocks are reused fleet-wide), and
different for every tenant. A salt the client sent is combined with the tenant's, never
trusted alone: two tenants sending the same salt still get different ones.

The body is otherwise sent byte for byte: the salt is inserted as the object's first
member; only a body that already holds `cache_salt` is re-serialised. A `cache_salt`
vLLM would refuse (not a non-empty string) is left as sent, so the model server refuses
it as it would without the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blake3 import blake3

from sidecar.wire.anthropic.keys import MESSAGES
from sidecar.wire.openai.keys import CHAT, COMPLETIONS
from sidecar.wire.openai.responses import RESPONSES
from sidecar.wire.values import dumps

FIELD = "cache_salt"
SALTED = frozenset({CHAT, COMPLETIONS, RESPONSES, MESSAGES})
"""The endpoints whose requests vLLM reads a cache_salt of (embeddings share no KV; vLLM's
Messages API hands its `cache_salt` to the chat request it builds)."""
PREFIX = "ic1-"
"""Marks a salt the gateway derived (and the version of the derivation)."""


class TenantSalts:
    """Derives a tenant's salt under a 32-byte key and puts it into request bodies."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a tenant salt key is 32 bytes")
        self._key = key

    def salt(self, tenant: str, client_salt: str | None = None) -> str:
        """The salt of `tenant` (combined with the client's own, when it sent one)."""
        h = blake3(key=self._key)
        for part in (tenant, client_salt):
            if part is None:
                h.update(b"\x00")
            else:
                data = part.encode("utf-8", "surrogatepass")
                h.update(b"\x01" + len(data).to_bytes(8, "big") + data)
        return PREFIX + h.hexdigest(length=16)

    def body_for(self, endpoint: str, tenant: str, doc: Mapping[str, Any], raw: bytes) -> bytes:
        """The bytes to send the model server for a request `raw` (parsed: `doc`)."""
        if endpoint not in SALTED:
            return raw
        if FIELD not in doc or doc[FIELD] is None:
            # null is what vLLM reads as no salt: the tenant's own, alone.
            if FIELD in doc:
                return _reserialised(doc, self.salt(tenant))
            return _inserted(raw, self.salt(tenant))
        sent = doc[FIELD]
        if not isinstance(sent, str) or not sent:
            return raw  # vLLM refuses it: left for it to refuse
        return _reserialised(doc, self.salt(tenant, sent))


def _inserted(raw: bytes, salt: str) -> bytes:
    """`raw` (a JSON object) with `"cache_salt": salt` as its first member."""
    start = raw.index(b"{") + 1
    member = b'"' + FIELD.encode() + b'":"' + salt.encode() + b'"'
    rest = raw[start:]
    empty = rest.strip(b" \t\r\n") == b"}"
    return raw[:start] + member + (b"" if empty else b",") + rest


def _reserialised(doc: Mapping[str, Any], salt: str) -> bytes:
    return dumps({**doc, FIELD: salt}).encode("utf-8")
