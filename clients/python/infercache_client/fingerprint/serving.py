"""The serving component: options the operator declares that change outputs with identical
files (vLLM's --dtype, --quantization, --chat-template, --override-generation-config,
--max-model-len, which can change RoPE scaling, ...).

Declared as a JSON object in a file (INFERCACHE_SERVING_CONFIG, or `infercache
fingerprint --serving-config F`), e.g. {"--dtype": "bfloat16", "--max-model-len": 8192}.
Hashed canonically (sorted keys, compact), so formatting and key order do not count.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blake3 import blake3

from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.files import ABSENT
from infercache_client.fingerprint.hashing import frame, keyed_hasher

_SCALARS = (str, int, float, bool)


def load_serving_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The options of a serving-config file; FingerprintError naming the file if it is not a
    JSON object of option -> string, number, boolean, or a list or object of those."""
    p = Path(path)
    try:
        doc = json.loads(p.read_bytes())
    except OSError as exc:
        raise FingerprintError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    except (ValueError, RecursionError) as exc:
        raise FingerprintError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not all(_plain(v) for v in doc.values()):
        raise FingerprintError(
            f"{p}: must be a JSON object of option -> value (string, number, boolean, list, object)"
        )
    return doc


def serving_digest(options: Mapping[str, Any] | None) -> str:
    """Hex digest of the declared options, or ABSENT when none are declared."""
    if options is None:
        return ABSENT
    canonical = json.dumps(dict(options), sort_keys=True, separators=(",", ":"))
    hasher = keyed_hasher("serving")
    hasher.update(frame(b"options", blake3(canonical.encode()).digest()))
    return hasher.hexdigest()


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return isinstance(value, _SCALARS)
