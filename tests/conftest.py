"""Shared fixtures: a real redis-server per session, flushed between tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.redis_server import RedisServer

# Per-example deadlines measure the machine, not the code: on a loaded 2-core CI
# runner a first example that imports or warms caches can take 400 ms. Example
# counts stay at the default; pytest-timeout still bounds every test.
settings.register_profile("infercache", deadline=None)
settings.load_profile("infercache")


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


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server this test may kill and restart."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()
