"""The fleet's verification events on Redis (sidecar/verification/audit.py's EventLog).

Layout: `{prefix}{meta}:verify-audit`, a stream (XADD, MAXLEN ~ VERIFY_AUDIT_MAXLEN, read
newest first with XREVRANGE) of entries {member, event, tag}: `event` is the event's
canonical JSON, `tag` the keyed BLAKE3 of (member, event) under the fleet's
"verify-audit" key. An entry planted or altered without the fleet secret is left out of
every listing, counted (`rejected`) and logged, as the invalidation audit's are.
"""

from __future__ import annotations

from typing import cast

import structlog

from sidecar.backends.redis.backend import RedisBackend
from sidecar.backends.redis.client import RedisGuard, RedisKeys
from sidecar.macs import FleetKeys
from sidecar.verification.audit import AuditedEvent, event_from_json, event_json
from sidecar.verification.ledger import Event

log = structlog.get_logger("infercache.verification")

VERIFY_AUDIT_MAXLEN = 10_000
"""Events kept (approximately: XADD MAXLEN ~); quarantines are rare, so this is years."""
PURPOSE = "verify-audit"


class RedisEventLog:
    """EventLog on the control store's Redis (one server or the {meta} slot of a cluster)."""

    def __init__(
        self, client: RedisBackend, *, key_prefix: str, timeout_s: float, keys: FleetKeys
    ) -> None:
        self._client = client.redis
        self._key = RedisKeys(key_prefix).meta("verify-audit")
        self._timeout_s = timeout_s
        self._keys = keys
        self._guard = RedisGuard("redis verification audit")
        self.rejected = 0
        """Entries left out of a listing because their tag did not verify."""

    async def append(self, member_id: str, event: Event) -> None:
        """XADD of the signed event."""
        member, doc = member_id.encode(), event_json(event)
        tag = self._keys.sign(PURPOSE, member, doc)
        async with self._guard(self._timeout_s):
            await self._client.xadd(
                self._key,
                {b"member": member, b"event": doc, b"tag": tag},
                maxlen=VERIFY_AUDIT_MAXLEN,
                approximate=True,
            )

    async def newest(self, limit: int) -> list[AuditedEvent]:
        """XREVRANGE; entries whose tag fails are left out."""
        async with self._guard(self._timeout_s):
            rows = cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                await self._client.xrevrange(self._key, "+", "-", count=limit),
            )
        out = []
        for entry_id, fields in rows:
            found = self._open(fields)
            if found is None:
                self.rejected += 1
                log.warning("verification_event_rejected", id=entry_id.decode(errors="replace"))
            else:
                out.append(found)
        return out

    def _open(self, fields: dict[bytes, bytes]) -> AuditedEvent | None:
        member, doc, tag = fields.get(b"member"), fields.get(b"event"), fields.get(b"tag")
        if member is None or doc is None or tag is None:
            return None
        if not self._keys.verify(PURPOSE, tag, member, doc):
            return None
        try:
            return AuditedEvent(member.decode(), event_from_json(doc))
        except (ValueError, UnicodeDecodeError):
            return None
