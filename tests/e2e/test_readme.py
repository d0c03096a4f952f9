"""README's Python example runs as written against a real `infercache serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.readme import DOCUMENTED_ADDRESS, readme_example, readme_examples, run_example
from tests.support.sidecars import SidecarProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    """`infercache serve` with its defaults except the port; yields host:port."""
    proc = SidecarProcess(operator=True, log_path=tmp_path / "serve.stderr")
    try:
        proc.wait_ready()
        yield proc.target
    finally:
        proc.stop()


def test_readme_example_stores_then_hits(sidecar: str) -> None:
    """Run as written, the example misses and stores; run again, it hits the stored answer."""
    code = readme_example().replace(DOCUMENTED_ADDRESS, sidecar)

    first = run_example(code)
    assert first["found"].outcome == pb.LOOKUP_OUTCOME_MISS
    with CacheClient(sidecar) as client:
        stored = client.lookup(first["key"])
    assert stored.outcome == pb.LOOKUP_OUTCOME_HIT, "the example's store did not happen"
    assert stored.payload == first["answer"]

    second = run_example(code)
    assert second["found"].outcome == pb.LOOKUP_OUTCOME_HIT
    assert second["answer"] == first["answer"]


def test_readme_streaming_example_stores_then_replays(sidecar: str) -> None:
    """Run as written, the streaming example stores the generated pieces as chunks; run
    again, it replays them from the cache."""
    code = readme_examples()[1].replace(DOCUMENTED_ADDRESS, sidecar)

    first = run_example(code)
    assert first["text"] == "Open Settings, then 'Reset password'."
    with CacheClient(sidecar) as client:
        stream = client.lookup_stream(_example_key(first))
        header = stream.header()
        chunks = [c.data.decode() for c in stream]
    assert header.lookup.outcome == pb.LOOKUP_OUTCOME_HIT, "the example's stream was not stored"
    assert chunks == ["Open ", "Settings, ", "then ", "'Reset password'."]
    assert header.finish_reason == "stop"

    second = run_example(code)
    assert second["text"] == first["text"]


def _example_key(namespace: dict[str, Any]) -> pb.CacheKey:
    """The key the streaming example builds (it is local to its function)."""
    make_key = namespace["make_key"]
    key: pb.CacheKey = make_key(
        tenant="acme",
        model_version="fp1-3f9a...",
        prompt_version="support-v3",
        text="How do I reset my password?",
        temperature=0.0,
    )
    return key
