"""A different LoRA adapter never shares blocks (the chain is seeded by its name and the
fingerprint of its files); the same adapter reuses its own."""

from __future__ import annotations

from pathlib import Path

from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models, write_lora
from tests.support.vllm_sidecar import SidecarServer

LOADABLE = (len(PROMPTS["a"]) - 1) // BLOCK_SIZE * BLOCK_SIZE


def test_another_lora_never_shares_blocks(
    models: Models, sidecar: SidecarServer, tmp_path: Path
) -> None:
    write_lora(tmp_path / "alpha", seed=1)
    write_lora(tmp_path / "beta", seed=2)
    engine = EngineProcess(
        models.v1, connector="infercache", extra={"sidecar": sidecar.target}, lora=True
    )
    prompt = PROMPTS["a"]

    def ask(lora: Path | None) -> tuple[int, list[int]]:
        (out,) = engine.generate([prompt], lora=str(lora) if lora else None)
        return out["cached"], out["tokens"]

    try:
        alpha_cached, alpha = ask(tmp_path / "alpha")
        base_cached, base = ask(None)
        beta_cached, beta = ask(tmp_path / "beta")
        again = ask(tmp_path / "alpha")
        base_again = ask(None)
    finally:
        engine.close()
    assert alpha != base, "the adapter changes the answer (else this test proves nothing)"
    assert (alpha_cached, base_cached, beta_cached) == (0, 0, 0), "no adapter shares blocks"
    assert again == (LOADABLE, alpha), "alpha reuses its own blocks"
    assert base_again == (LOADABLE, base)
    assert beta != alpha
