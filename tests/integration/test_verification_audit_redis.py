"""The durable verification event log on a real redis-server and a real Redis Cluster:
events kept with their sidecar's member id, newest first, and an entry planted or
altered without the fleet secret left out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import pytest

from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.verify_audit import RedisEventLog
from sidecar.macs import FleetKeys
from sidecar.verification.audit import EventWriter
from sidecar.verification.bounds import Excess
from sidecar.verification.ledger import Event, Scope
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis

KEYS = FleetKeys([b"s" * 32])


@pytest.fixture
async def client(
    shared_redis: RedisServer | RedisClusterProcesses,
) -> AsyncIterator[RedisBackend]:
    """A client of the test's (flushed) Redis or Redis Cluster."""
    c = connect(shared_redis.url, connect_timeout_s=2, socket_timeout_s=2)
    yield c
    await c.aclose()


def event(action: str, time_ms: int, caller: str = "") -> Event:
    """One event of scope (fp, acme, p1)."""
    return Event(
        time_ms,
        Scope("fp", "acme", "p1"),
        action,
        caller,
        "why",
        12,
        11,
        300,
        6,
        Excess(0.9, 0.7, 0.95),
    )


async def test_events_are_kept_signed_with_their_member(client: RedisBackend) -> None:
    """Two sidecars' events come back newest first, whole, each with its member id; a
    log with another fleet secret sees none of them (each counted as rejected)."""
    log = RedisEventLog(client, key_prefix="t:", timeout_s=2, keys=KEYS)
    writer = EventWriter(log, "member-a")
    writer.add(event("quarantined", 1))
    writer.add(event("acknowledged", 2, caller="deployer"))
    await writer.drain()
    await log.append("member-b", event("quarantined", 3))
    found = await log.newest(10)
    assert [(a.member_id, a.event) for a in found] == [
        ("member-b", event("quarantined", 3)),
        ("member-a", event("acknowledged", 2, caller="deployer")),
        ("member-a", event("quarantined", 1)),
    ]
    assert writer.written == 2
    assert [a.event.time_ms for a in await log.newest(1)] == [3]
    other = RedisEventLog(client, key_prefix="t:", timeout_s=2, keys=FleetKeys([b"o" * 32]))
    assert await other.newest(10) == []
    assert other.rejected == 3


async def test_an_altered_event_is_left_out(client: RedisBackend) -> None:
    """An entry whose event was rewritten in Redis (or whose member was) fails its tag."""
    log = RedisEventLog(client, key_prefix="t:", timeout_s=2, keys=KEYS)
    await log.append("member-a", event("quarantined", 1))
    await log.append("member-a", event("quarantined", 2))
    key = "t:{meta}:verify-audit"
    rows = cast(list[tuple[bytes, dict[bytes, bytes]]], await client.redis.xrange(key))
    _, fields = rows[0]
    forged = fields[b"event"].replace(b'"quarantined"', b'"acknowledged"')
    await client.redis.xadd(key, {b"member": b"member-a", b"event": forged, b"tag": fields[b"tag"]})
    await client.redis.xadd(
        key, {b"member": b"member-z", b"event": fields[b"event"], b"tag": fields[b"tag"]}
    )
    found = await log.newest(10)
    assert [(a.member_id, a.event.action, a.event.time_ms) for a in found] == [
        ("member-a", "quarantined", 2),
        ("member-a", "quarantined", 1),
    ]
    assert log.rejected == 2
