"""Golden key vectors: requests, the CacheKey bytes the Python client builds for each and the
digest the sidecar computes, for the TypeScript client's makeKey to match byte for byte.

    python -m tests.support.key_vectors [--check]   # `make key-vectors` / `key-vectors-check`

writes (or checks) clients/typescript/test/key-vectors.json. Every vector is a make_key call
(tests/support/key_vector_cases.py); its `init` is the same request in makeKey's shape
(camelCase key fields, OpenAI-style messages as sent). Bytes are {"$bytes": hex}, integers
beyond 2**53 {"$bigint": decimal}. `refusals` are inputs make_key refuses, with the text
makeKey's Error must match. Vectors are distinct requests (distinct digests) unless one names
another in `same_as` (an equivalence the sidecar keeps, such as a stop string and its list).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from sidecar.api.cache_codec import key_request_from_pb
from sidecar.keys import build_key
from tests.support.key_refusal_cases import REFUSALS
from tests.support.key_vector_cases import BASE, VECTORS

PATH = Path(__file__).resolve().parents[2] / "clients/typescript/test/key-vectors.json"
_SAFE = 2**53
_KEY_ARGS = frozenset(
    {
        "tenant",
        "prompt_version",
        "model_version",
        "adapter_version",
        "text",
        "chat",
        "token_ids",
        "input_sha256",
        "extra",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "endpoint",
        "chat_template",
        "output",
    }
)
# Field names that are renamed (snake_case -> camelCase) per level; values (messages, JSON
# objects, extra) keep their own keys.
_RENAMED_LEVELS = frozenset({"sampling", "response_format", "guided", "chat_template", "output"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _value(value: Any) -> Any:
    """A Python value as the vector file writes it (bytes and big integers marked)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return value if -_SAFE < value < _SAFE else {"$bigint": str(value)}
    if isinstance(value, Mapping):
        return {str(k): _value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    raise TypeError(f"no vector form for {type(value).__name__}")


def _fields(value: Any) -> Any:
    # `value` fills a message: its field names are camelCased, nothing in their values.
    if not isinstance(value, Mapping):
        return _value(value)
    return {_camel(k): _fields(v) if k in _RENAMED_LEVELS else _value(v) for k, v in value.items()}


def ts_init(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The make_key call `kwargs` as makeKey's init: key fields camelCased, the sampling
    keyword arguments under `sampling`."""
    out: dict[str, Any] = {}
    sampling: dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in _KEY_ARGS:
            renamed = name in ("chat_template", "output")
            out[_camel(name)] = _fields(value) if renamed else _value(value)
        else:
            sampling[name] = value
    if sampling:
        out["sampling"] = _fields(sampling)
    return out


def _digest(key: pb.CacheKey) -> bytes:
    # What the sidecar does with a CacheKey it receives (unknown fields, then build_key).
    return build_key(key_request_from_pb(pb.CacheKey.FromString(key.SerializeToString()))).digest


def build() -> dict[str, Any]:
    """The vector file's content; raises if a vector is refused or a refusal is accepted."""
    vectors = []
    by_name: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name, kwargs, same_as in VECTORS:
        call = BASE | kwargs
        key = make_key(**call)
        digest = _digest(key).hex()
        if same_as is not None:
            assert by_name[same_as] == digest, f"{name}: digest differs from {same_as}"
        else:
            assert digest not in seen, f"{name}: same digest as {seen.get(digest)}"
        seen.setdefault(digest, name)
        by_name[name] = digest
        vector = {
            "name": name,
            "init": ts_init(call),
            "key": key.SerializeToString(deterministic=True).hex(),
            "digest": digest,
        }
        if same_as is not None:
            vector["same_as"] = same_as
        vectors.append(vector)
    refusals = []
    for name, kwargs, error in REFUSALS:
        call = BASE | kwargs
        try:
            make_key(**call)
        except (TypeError, ValueError, KeyError, AttributeError, UnicodeError):
            pass
        else:
            raise AssertionError(f"refusal {name!r}: make_key accepted it")
        refusals.append({"name": name, "init": ts_init(call), "error": error})
    return {"vectors": vectors, "refusals": refusals}


def render() -> str:
    """The file's text: ASCII JSON (look-alikes and lone surrogates spelled as escapes)."""
    return json.dumps(build(), indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    """Write the vector file, or with --check exit 1 when it is stale."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail instead of writing")
    args = parser.parse_args()
    fresh = render()
    current = PATH.read_text(encoding="utf-8") if PATH.exists() else ""
    if fresh == current:
        return 0
    if args.check:
        print(f"{PATH}: key vectors are stale; run `make key-vectors`")
        return 1
    PATH.write_text(fresh, encoding="utf-8")
    print(f"{PATH}: {len(json.loads(fresh)['vectors'])} key vectors written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
