"""The non-weight components: which files shape behaviour and how each is hashed.

- config: config.json (adapter_config.json for an adapter), the Mistral-format
  params.json and GPTQ's quantize_config.json when present, plus any top-level
  remote-code `*.py` other than tokenizer code (with trust_remote_code it *is* the model).
- generation_config: generation_config.json.
- tokenizer: tokenizer and input-processing files, the chat template included
  (tokenizer_config.json, chat_template.jinja, additional_chat_templates/, Mistral's
  tekken.json and tokenizer.model.v*, ...).

Small JSON config files are hashed in canonical form (sorted keys, compact), with
top-level keys that only record where a file was saved from (PATH_KEYS) dropped, so a
copy re-saved elsewhere hashes alike; every other file is hashed byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from blake3 import blake3

from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.hashing import frame, keyed_hasher

ABSENT = "absent"

PATH_KEYS = frozenset(
    {"_name_or_path", "name_or_path", "_commit_hash", "base_model_name_or_path", "tokenizer_file"}
)
CANONICAL_JSON = frozenset(
    {
        "config.json",
        "adapter_config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
        "params.json",
        "quantize_config.json",
    }
)
CONFIG_EXTRAS = ("params.json", "quantize_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "tekken.json",
    "preprocessor_config.json",
    "processor_config.json",
)
TOKENIZER_GLOBS = (
    "*.tiktoken",
    "tokenization_*.py",
    "additional_chat_templates/*.jinja",
    "tokenizer.model.v*",
)


def config_digest(root: Path, config_name: str) -> str:
    """Digest of the required config file plus remote-code modules; FingerprintError if absent."""
    if read_optional(root / config_name) is None:
        raise FingerprintError(f"{root}: no {config_name}; not a model or adapter directory")
    code = (p.name for p in root.glob("*.py") if not p.name.startswith("tokenization_"))
    return component_digest("config", root, [config_name, *CONFIG_EXTRAS, *code])


def generation_config_digest(root: Path) -> str:
    """Digest of generation_config.json, or ABSENT."""
    return component_digest("generation_config", root, ["generation_config.json"])


def tokenizer_digest(root: Path) -> str:
    """Digest of every tokenizer / chat-template / processor file present, or ABSENT."""
    globbed = (p.relative_to(root).as_posix() for g in TOKENIZER_GLOBS for p in root.glob(g))
    return component_digest("tokenizer", root, [*TOKENIZER_FILES, *globbed])


def component_digest(purpose: str, root: Path, names: Iterable[str]) -> str:
    """Hex digest over (name, content digest) of each present file in name order, or ABSENT."""
    hasher = keyed_hasher(purpose)
    present = 0
    for name in sorted(set(names)):
        content = read_optional(root / name)
        if content is None:
            continue
        if name in CANONICAL_JSON:
            content = canonical_json(content, root / name)
        hasher.update(frame(name.encode(), blake3(content).digest()))
        present += 1
    return hasher.hexdigest() if present else ABSENT


def canonical_json(content: bytes, path: Path) -> bytes:
    """`content` re-serialised with sorted keys and PATH_KEYS dropped from the top level."""
    try:
        obj = json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise FingerprintError(f"{path}: not valid JSON ({exc})") from exc
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k not in PATH_KEYS}
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read_optional(path: Path) -> bytes | None:
    """The file's bytes, or None if it does not exist; a dangling symlink is an error."""
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        if path.is_symlink():
            # In a Hugging Face cache this means a blob is missing: an incomplete download.
            raise FingerprintError(f"{path}: dangling symlink") from exc
        return None
    except OSError as exc:
        raise FingerprintError(f"{path}: cannot read ({exc.strerror or exc})") from exc
