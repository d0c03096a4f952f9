"""Streams across real processes: two `infercache serve` sidecars on one Redis, and a client
process killed with SIGKILL in the middle of a StoreStream."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, join_chunks, make_pacing

from tests.support.keys import key
from tests.support.processes import REPO, RedisServer
from tests.support.sidecars import SidecarProcess, cli_env

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(90)]

PARTS = ["The ", "cache ", "replays ", "this ", "answer."]


@pytest.fixture
def fleet(redis_server: RedisServer) -> Iterator[tuple[SidecarProcess, SidecarProcess]]:
    """Sidecars A and B, separate processes sharing one redis-server."""
    # A generous read deadline: on a loaded CI machine a 50 ms one degrades lookups
    # (no lease hold taken), which these tests would misread.
    a = SidecarProcess(redis_server.url, lookup_timeout_ms=1000)
    b = SidecarProcess(redis_server.url, lookup_timeout_ms=1000)
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_streamed_store_replays_from_the_warm_tier_of_another_sidecar(
    fleet: tuple[SidecarProcess, SidecarProcess],
) -> None:
    """StoreStream on A; LookupStream on B replays the same chunks from Redis, paced."""
    a, b = fleet
    k = key("streamed on A")
    with CacheClient(a.target) as ca, CacheClient(b.target) as cb:
        miss = ca.lookup(k)
        with ca.store_stream(k, miss.lease) as w:
            for p in PARTS:
                w.send(p, tokens=1)
            w.finish("length")
        assert w.response is not None
        assert w.response.store.outcome == pb.STORE_OUTCOME_STORED
        started = time.monotonic()
        stream = cb.lookup_stream(k, pacing=make_pacing(tokens_per_second=20))
        header = stream.header()
        chunks = list(stream)
        elapsed = time.monotonic() - started
        assert stream.cache_marker() == "hit"
    assert (header.lookup.outcome, header.lookup.tier) == (pb.LOOKUP_OUTCOME_HIT, pb.TIER_WARM)
    assert header.finish_reason == "length"
    assert [c.data.decode() for c in chunks] == PARTS
    assert all(c.cached for c in chunks)
    assert 0.15 <= elapsed < 5.0, elapsed  # 4 gaps of one token at 20 tokens/s


def test_plain_store_with_chunks_replays_on_another_sidecar(
    fleet: tuple[SidecarProcess, SidecarProcess],
) -> None:
    """Store(payload, chunk boundaries) on A; LookupStream on B gets the boundaries back."""
    a, b = fleet
    k = key("chunked store on A")
    payload, bounds = join_chunks(PARTS, tokens=[1, 1, 2, 1, 2])
    with CacheClient(a.target) as ca, CacheClient(b.target) as cb:
        miss = ca.lookup(k)
        assert ca.store(k, payload, lease=miss.lease, chunks=bounds).outcome == (
            pb.STORE_OUTCOME_STORED
        )
        chunks = list(cb.lookup_stream(k))
    assert [(c.data.decode(), c.tokens) for c in chunks] == list(
        zip(PARTS, [1, 1, 2, 1, 2], strict=True)
    )


_WRITER = textwrap.dedent(
    """
    import sys, time
    from infercache.v1 import cache_pb2 as pb
    from infercache_client import CacheClient
    from tests.support.keys import key

    k = key("killed writer")
    with CacheClient(sys.argv[1]) as c:
        for _ in range(50):  # a degraded lookup takes no hold; ask again
            miss = c.lookup(k)
            if miss.lease_holder:
                break
            time.sleep(0.1)
        assert miss.lease_holder
        with c.store_stream(k, miss.lease) as w:
            for part in ("partial ", "answer ", "that never "):
                w.send(part)
            c.server_info()  # the chunks are on the wire before we say so
            print("sent", flush=True)
            time.sleep(60)
            w.send("finishes")
    """
)


def test_client_killed_mid_stream_stores_nothing(
    fleet: tuple[SidecarProcess, SidecarProcess],
) -> None:
    """A writer process SIGKILLed mid-stream leaves no entry and releases its lease hold."""
    a, b = fleet
    k = key("killed writer")
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, a.target],
        cwd=REPO,
        env=cli_env(None) | {"PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "sent", "writer did not start"
        with CacheClient(a.target) as ca:
            held = ca.lookup(k)
            assert held.outcome == pb.LOOKUP_OUTCOME_MISS
            assert not held.lease_holder, "the writer holds the key while it streams"
            os.kill(writer.pid, signal.SIGKILL)
            writer.wait(timeout=10)
            # The sidecar notices the dead stream and gives up its hold: the next
            # caller becomes the holder (long before the 60 s lease TTL).
            deadline = time.monotonic() + 10
            while True:
                probe = ca.lookup(k)
                assert probe.outcome == pb.LOOKUP_OUTCOME_MISS, "a partial entry is visible"
                if probe.lease_holder:
                    break
                assert time.monotonic() < deadline, "the killed stream kept its hold"
                time.sleep(0.05)
        with CacheClient(b.target) as cb:
            assert cb.lookup(k).outcome == pb.LOOKUP_OUTCOME_MISS
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
