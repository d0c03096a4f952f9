"""The tiny causal transformer used by the KV tests: prefix reuse is exact, stale KV is not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.kv_model.model import (
    TinyConfig,
    fine_tuned,
    load_checkpoint,
    random_state,
    write_checkpoint,
)
from tests.support.kv_model.serving import full_logits, prompt


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """v1 (random weights) and v2 (v1 after a small weight update) on disk."""
    root = tmp_path_factory.mktemp("tiny")
    cfg = TinyConfig()
    v1 = random_state(cfg, seed=1)
    return write_checkpoint(root / "v1", cfg, v1), write_checkpoint(
        root / "v2", cfg, fine_tuned(v1, seed=2)
    )


def test_checkpoint_round_trip(checkpoints: tuple[Path, Path]) -> None:
    """safetensors + config.json load back into the same weights."""
    v1, _ = checkpoints
    state = random_state(TinyConfig(), seed=1)
    loaded = load_checkpoint(v1).state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[n], state[n]) for n in state)


def test_suffix_with_past_kv_equals_full_recompute(checkpoints: tuple[Path, Path]) -> None:
    """Past K/V of a 64-token prefix plus the suffix gives the full forward's logits."""
    model = load_checkpoint(checkpoints[0])
    prefix, suffix = prompt(1, 64), prompt(2, 10)
    _, kv = model(torch.tensor(prefix))
    logits, _ = model(torch.tensor(suffix), kv)
    reference = full_logits(model, prefix + suffix, "cpu")[64:]
    assert (logits - reference).abs().max().item() <= 1e-5


def test_stale_kv_from_other_weights_changes_logits(checkpoints: tuple[Path, Path]) -> None:
    """v1's prefix K/V under v2's weights is far from v2's own answer: the silent failure."""
    v1, v2 = (load_checkpoint(p) for p in checkpoints)
    prefix, suffix = prompt(1, 64), prompt(2, 10)
    _, kv_v1 = v1(torch.tensor(prefix))
    stale, _ = v2(torch.tensor(suffix), kv_v1)
    reference = full_logits(v2, prefix + suffix, "cpu")[64:]
    assert (stale - reference).abs().max().item() > 1e-2
    assert not torch.equal(stale.argmax(-1), reference.argmax(-1))
