"""README's Python example runs as written against a real `infercache serve`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.e2e.process import Served
from tests.redis_server import free_port

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTED_ADDRESS = "127.0.0.1:50051"


def readme_example() -> str:
    """The one ```python block of README.md."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, f"expected one python block in README.md, found {len(blocks)}"
    code: str = blocks[0]
    assert DOCUMENTED_ADDRESS in code, "the example no longer talks to the `make run` address"
    return code


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    """`infercache serve` with its defaults except the port; yields host:port."""
    target = f"127.0.0.1:{free_port()}"
    proc = Served(tmp_path, "--listen", target)
    try:
        proc.wait_serving(target)
        yield target
    finally:
        proc.stop()


def run_example(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


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
