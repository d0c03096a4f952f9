"""Issue 25 item 2: KV warm blocks and prewarm hit records in Redis are authenticated.

A real redis-server; the attacker is a plain redis-py client rewriting what was stored.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator

import pytest
import redis
import xxhash

from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.hits import RedisHitStore
from sidecar.backends.redis.kv_warm import RedisKvWarmStore
from sidecar.keys import KeyDigest
from sidecar.kv.layout import version_tag
from sidecar.macs import FleetKeys
from tests.support.kv_tier import BLOCK, Setup, pattern
from tests.support.processes import RedisServer

pytestmark = pytest.mark.redis

KEYS = FleetKeys([b"the fleet secret of these tests, 32 bytes+"])
CHAIN = [b"\x01" * 32]


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisBackend]:
    """The sidecar's client of the (flushed) test Redis."""
    c = connect(redis_server.url, connect_timeout_s=2, socket_timeout_s=2)
    yield c
    await c.aclose()


def _old_format(key: bytes, payload: bytes) -> bytes:
    """A block as 88bc6e9 wrote it: format 2, unkeyed XXH3-128 (anyone can compute it)."""
    h = xxhash.xxh3_128(key)
    h.update(payload)
    return (
        struct.pack(">4sBH", b"ICKV", 2, len(key))
        + key
        + struct.pack(">I", len(payload))
        + h.digest()
        + payload
    )


async def test_a_forged_kv_warm_block_is_refused_on_promotion(
    client: RedisBackend, redis_server: RedisServer
) -> None:
    """Issue 25 repro 1 (KV): a demoted block rewritten in Redis with attacker bytes and a
    recomputed checksum is not promoted after a weight rollback; it is counted."""
    warm = RedisKvWarmStore(client, key_prefix="ic:t:", timeout_s=2, keys=KEYS)
    s = Setup(warm=warm, promote_timeout_ms=5000)  # under load: a verdict, not retry_later
    a = await s.attach("fp-v1")
    await s.put(a, CHAIN)
    await s.attach("fp-v2")  # demotes v1's block to Redis
    await s.tier.settled()
    raw = redis.Redis.from_url(redis_server.url)
    [rkey] = raw.keys("ic:t:kv:" + version_tag("fp-v1") + ":*")
    genuine = raw.get(rkey)
    assert isinstance(genuine, bytes)
    block_key = genuine[7 : 7 + struct.unpack_from(">H", genuine, 5)[0]]
    raw.set(rkey, _old_format(block_key, b"\xee" * BLOCK), keepttl=True)
    raw.close()
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert r.slots == []
    assert s.tier.stats.corrupt_warm_values == 1


async def test_a_genuine_kv_block_still_promotes(client: RedisBackend) -> None:
    """Untouched, the block sealed under the fleet key comes back with its bytes."""
    warm = RedisKvWarmStore(client, key_prefix="ic:t:", timeout_s=2, keys=KEYS)
    s = Setup(warm=warm, promote_timeout_ms=5000)  # under load: a verdict, not retry_later
    a = await s.attach("fp-v1")
    await s.put(a, CHAIN)
    await s.attach("fp-v2")
    await s.tier.settled()
    back = await s.attach("fp-v1")
    r = await s.tier.lookup_prefix(back, "t", "", CHAIN)
    assert r.promoted == 1
    assert bytes(s.tier.pool.read_many(r.slots, BLOCK)[0]) == pattern(CHAIN[0])


async def test_a_planted_or_moved_hit_record_reads_as_absent_and_is_counted(
    client: RedisBackend, redis_server: RedisServer
) -> None:
    """A record planted without the fleet secret, or a genuine one moved under another
    digest, is never handed to prewarm (request None: not replayable), and counted."""
    store = RedisHitStore(
        client, key_prefix="ic:t:", max_per_version=10, ttl_ms=60_000, timeout_s=2, keys=KEYS
    )
    mine, planted, moved = KeyDigest(b"\x01" * 32), KeyDigest(b"\x02" * 32), KeyDigest(b"\x03" * 32)
    await store.attach("fp1-v1", mine, b'{"path":"/v1/chat/completions"}', 30_000)
    await store.merge("fp1-v1", [(mine, 3), (planted, 2), (moved, 1)])
    raw = redis.Redis.from_url(redis_server.url)
    [genuine_key] = raw.keys("ic:t:{hits:*}:q:" + mine.hex())
    assert isinstance(genuine_key, bytes)
    base = genuine_key.decode().rsplit("q:", 1)[0]
    raw.set(base + "q:" + planted.hex(), b"\x00" * 32 + b'{"path":"https://evil.example/"}')
    raw.set(base + "q:" + moved.hex(), raw.get(genuine_key) or b"")
    raw.close()
    top = await store.top("fp1-v1", 3)
    assert [(t.digest, t.request) for t in top] == [
        (mine, b'{"path":"/v1/chat/completions"}'),
        (planted, None),
        (moved, None),
    ]
    assert store.rejected_records == 2
