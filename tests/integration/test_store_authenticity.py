"""Issue 25 item 2: a writer to Redis without the fleet secret cannot produce a hit.

Real redis-server, real in-process sidecars over gRPC; the attacker is a plain redis-py
client that rewrites what the sidecar stored.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from blake3 import blake3
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.errors import StoreDistrusted
from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import StartSidecar

SLOW_HOST = {"lookup_timeout_ms": "2000"}
"""A loaded CI host can miss the 50 ms default: each verdict here must be read, not timed out."""

pytestmark = pytest.mark.redis

# The v3 header: magic, version, created_at_ms, ttl_s, epoch, latency, prompt and
# completion tokens, material and payload lengths (sidecar/entries.py).
_HEADER = struct.Struct(">3sBQIQIIIII")


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain redis-py client: the attacker with write access to Redis."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def _secret_file(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_bytes(f"fleet secret {name} ".encode() * 4)
    return str(path)


async def _stored(sc: InProcessSidecar, raw: redis.Redis, text: str, payload: bytes) -> bytes:
    resp = await sc.store(key(text), payload)
    assert resp.outcome == pb.STORE_OUTCOME_STORED
    warm = sc.running.cache.warm
    assert isinstance(warm, RedisWarmTier)
    rkey = warm.redis_key(resp.key_digest)  # type: ignore[arg-type]
    assert raw.exists(rkey) == 1
    return rkey


def _forge(genuine: bytes, payload: bytes, epoch: int, version: int) -> bytes:
    """The genuine entry's header and key material with a new payload and epoch, sealed
    with an unkeyed BLAKE3 checksum (all the public format at 88bc6e9 asked for)."""
    fields = list(_HEADER.unpack_from(genuine))
    material = genuine[_HEADER.size : _HEADER.size + fields[8]]
    fields[1], fields[4], fields[9] = version, epoch, len(payload)
    body = _HEADER.pack(*fields) + material + payload
    return body + blake3(body).digest()


async def _miss_counted(sc: InProcessSidecar, text: str, reason: str, unwanted: bytes) -> None:
    before = sc.stats.total("rejected", reason=reason)
    resp = await sc.client.lookup(key(text))
    assert resp.outcome == pb.LOOKUP_OUTCOME_MISS
    assert unwanted not in resp.SerializeToString()
    assert sc.stats.total("rejected", reason=reason) == before + 1


@pytest.mark.parametrize("version", [1, 3])
async def test_a_forged_entry_with_an_unkeyed_checksum_and_epoch_2_62_is_a_counted_miss(
    start_sidecar: StartSidecar, redis_server: RedisServer, raw: redis.Redis, version: int
) -> None:
    """Issue 25 repro 1: the stored bytes rewritten (new payload, epoch 2^62, checksum
    recomputed) are a MISS counted as forged, in the old layout and in the new one."""
    sc = await start_sidecar(redis_url=redis_server.url, hot_max_entries="0", **SLOW_HOST)
    rkey = await _stored(sc, raw, "q", b"the real answer")
    genuine = raw.get(rkey)
    assert isinstance(genuine, bytes)
    raw.set(rkey, _forge(genuine, b"ATTACKER ANSWER", 2**62, version), keepttl=True)
    await _miss_counted(sc, "q", "forged", b"ATTACKER ANSWER")


async def test_a_genuine_entry_copied_under_another_key_is_a_counted_miss(
    start_sidecar: StartSidecar, redis_server: RedisServer, raw: redis.Redis
) -> None:
    """An authentic entry moved under another key's Redis key is a MISS counted as foreign."""
    sc = await start_sidecar(redis_url=redis_server.url, hot_max_entries="0", **SLOW_HOST)
    mine = await _stored(sc, raw, "mine", b"my answer")
    theirs = await _stored(sc, raw, "theirs", b"THEIR ANSWER")
    raw.set(mine, raw.get(theirs) or b"", keepttl=True)
    await _miss_counted(sc, "mine", "foreign", b"THEIR ANSWER")


async def test_rotation_values_of_key_a_verify_under_b_a_and_miss_under_b_alone(
    start_sidecar: StartSidecar, redis_server: RedisServer, raw: redis.Redis, tmp_path: Path
) -> None:
    """Rotation: what a sidecar signed with secret A hits on one configured [B, A]; a
    sidecar with B alone counts it as forged and misses, and verifies the rule chain
    (signed again with B by the rotating one); one with A alone then fails closed."""
    a, b = _secret_file(tmp_path, "a"), _secret_file(tmp_path, "b")
    url = redis_server.url
    old = await start_sidecar(redis_url=url, fleet_secret_file=a, hot_max_entries="0", **SLOW_HOST)
    await _stored(old, raw, "q", b"signed by A")
    rotating = await start_sidecar(
        redis_url=url,
        fleet_secret_file=b,
        fleet_previous_secret_file=a,
        hot_max_entries="0",
        **SLOW_HOST,
    )
    hit = await rotating.client.lookup(key("q"))
    assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"signed by A")
    await _stored(rotating, raw, "r", b"signed by B")
    new = await start_sidecar(redis_url=url, fleet_secret_file=b, hot_max_entries="0", **SLOW_HOST)
    assert (await new.client.lookup(key("r"))).payload == b"signed by B"
    await _miss_counted(new, "q", "forged", b"signed by A")
    # The rotating pod signed the rule chain again with B: B alone verifies it.
    assert new.running.freshness.distrust is None
    # A pod still on A alone cannot verify B's values either: a miss; and once it reads
    # the chain signed with B it serves no hits at all (fails closed).
    resp = await old.client.lookup(key("r"))
    assert resp.outcome == pb.LOOKUP_OUTCOME_MISS
    assert b"signed by B" not in resp.SerializeToString()
    with pytest.raises(StoreDistrusted):
        await old.running.freshness.refresh()
