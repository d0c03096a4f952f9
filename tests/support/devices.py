"""The devices a KV pool test runs on: the CPU always, CUDA as a `gpu` test when present."""

from __future__ import annotations

from typing import Any

import pytest


def _cuda_available() -> bool:
    # Without torch the importing test skips itself (importorskip); no collection error here.
    try:
        import torch
    except ModuleNotFoundError:
        return False
    return bool(torch.cuda.is_available())


KV_DEVICES: list[Any] = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device"),
        ],
    ),
]
"""Parameters for a test (or an indirect fixture) taking "cpu" or "cuda"."""
