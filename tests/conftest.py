"""Fixtures only (helpers live in tests/support/ and sidecar/testing.py)."""

from __future__ import annotations

import gc
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import pytest
from hypothesis import settings

from sidecar.testing import Clock, FlakyWarmTier, InProcessSidecar, Setting, in_process_sidecar
from tests.support.cluster import RedisClusterProcesses
from tests.support.processes import RedisServer
from tests.support.sidecars import StartSidecar

# tests/vllm runs in the vllm venv (`make test-vllm`, which `make test` runs after this
# suite): collecting it here would import vllm, which this venv does not have.
collect_ignore = ["vllm"]

# Per-example deadlines measure the machine, not the code: on a loaded 2-core CI
# runner a first example that imports or warms caches can take 400 ms. Example
# counts stay at the default; pytest-timeout still bounds every test.
settings.register_profile("infercache", deadline=None)
settings.load_profile("infercache")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what imports and collection built (grpc, protobuf, every test module): it
    lives for the whole run, and a full collection that walks it takes ~200 ms here,
    enough to blow an in-process sidecar's 50 ms production lookup deadline."""
    del session
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def redis_session() -> Iterator[RedisServer]:
    """One redis-server for the whole run, on a free port."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_server(redis_session: RedisServer) -> RedisServer:
    """The session's redis-server, emptied for this test."""
    if redis_session.proc is None:  # a previous test killed it
        redis_session.start()
    redis_session.flushall()
    return redis_session


@pytest.fixture(scope="session")
def redis_cluster_session() -> Iterator[RedisClusterProcesses]:
    """One Redis Cluster (3 masters + 3 replicas) for the whole run, started on first use."""
    cluster = RedisClusterProcesses()
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_cluster(redis_cluster_session: RedisClusterProcesses) -> RedisClusterProcesses:
    """The session's Redis Cluster, whole again (a test may have killed nodes) and empty."""
    if len(redis_cluster_session.procs) < len(redis_cluster_session.ports):
        redis_cluster_session.heal()
    redis_cluster_session.flushall()
    return redis_cluster_session


@pytest.fixture(params=["single", "cluster"])
def shared_redis(request: pytest.FixtureRequest) -> RedisServer | RedisClusterProcesses:
    """The fleet's shared Redis, once as one server and once as a Redis Cluster (each
    emptied); its `url` is what INFERCACHE_REDIS_URL is set to."""
    if request.param == "cluster":
        cluster: RedisClusterProcesses = request.getfixturevalue("redis_cluster")
        return cluster
    server: RedisServer = request.getfixturevalue("redis_server")
    return server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server this test may kill and restart."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_proc(own_redis: RedisServer) -> Iterator[RedisServer]:
    """own_redis, resumed (if a test froze it with SIGSTOP) before it is torn down."""
    yield own_redis
    if own_redis.proc is not None:
        own_redis.proc.send_signal(signal.SIGCONT)


@pytest.fixture
async def start_sidecar() -> AsyncIterator[StartSidecar]:
    """Factory: start_sidecar(setting=value, ...) starts an in-process sidecar with a
    client; all stop after the test.

    Settings are Config field names with text values, as `infercache serve` flags take
    them, over sidecar.testing.ISOLATED (no admin plane, no /metrics unless asked for).
    """
    async with AsyncExitStack() as stack:

        async def start(**settings: Setting) -> InProcessSidecar:
            return await stack.enter_async_context(in_process_sidecar(settings))

        yield start


@pytest.fixture
def clock() -> Clock:
    """A millisecond clock the test moves by hand."""
    return Clock()


@pytest.fixture
def flaky_warm(clock: Clock) -> FlakyWarmTier:
    """An embedded warm tier on `clock` that the test can take down (flaky_warm.down = True)."""
    return FlakyWarmTier(clock)
