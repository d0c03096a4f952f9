"""Fingerprint a model or LoRA adapter directory; compare two fingerprints."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.files import (
    ABSENT,
    config_digest,
    generation_config_digest,
    tokenizer_digest,
)
from infercache_client.fingerprint.hashing import frame, keyed_hasher
from infercache_client.fingerprint.memo import Memo
from infercache_client.fingerprint.serving import load_serving_config, serving_digest
from infercache_client.fingerprint.weights import (
    Mode,
    adapter_shards,
    extra_weight_files,
    model_shards,
    weights_digest,
)

Kind = Literal["model", "adapter"]
PREFIX = "fp1-"
COMPONENTS = ("config", "generation_config", "tokenizer", "weights", "serving")
FAST_COLD_THREADS = 16
FULL_MIN_THREADS = 4
StrPath = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A model's (or adapter's) identity: `value` plus the component digests it combines.

    Each component is a 64-hex-digit BLAKE3 digest or "absent". Two fingerprints are
    comparable only if `kind` and `mode` match: fast and full digests never coincide.
    """

    value: str
    """"fp1-" + 64 hex digits (256 bits) over kind, mode and the components (serving
    only when declared)."""
    kind: Kind
    mode: Mode
    config: str
    generation_config: str
    tokenizer: str
    weights: str
    tensors: int
    """Number of tensors the weights digest covers."""
    weight_bytes: int
    """Total size of those tensors in bytes."""
    serving: str = ABSENT
    """The serving options the operator declared (serving.py), or "absent"."""

    def components(self) -> dict[str, str]:
        """Component name -> digest or "absent", in COMPONENTS order."""
        return {name: getattr(self, name) for name in COMPONENTS}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field."""
        return {
            "fingerprint": self.value,
            "kind": self.kind,
            "mode": self.mode,
            "components": self.components(),
            "tensors": self.tensors,
            "weight_bytes": self.weight_bytes,
        }

    def to_json(self) -> str:
        """Stable JSON text (sorted keys) of `as_dict()`."""
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Fingerprint:
        """Parse `to_json()` output; FingerprintError if malformed or `value` does not match."""
        try:
            obj = json.loads(text)
            comps = obj["components"]
            fp = cls(
                value=obj["fingerprint"],
                kind=obj["kind"],
                mode=obj["mode"],
                config=comps["config"],
                generation_config=comps["generation_config"],
                tokenizer=comps["tokenizer"],
                weights=comps["weights"],
                serving=comps.get("serving", ABSENT),
                tensors=obj["tensors"],
                weight_bytes=obj["weight_bytes"],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise FingerprintError(f"not a fingerprint JSON document ({exc!r})") from exc
        expected = _combine(fp.kind, fp.mode, fp.components())
        if fp.kind not in get_args(Kind) or fp.mode not in get_args(Mode) or fp.value != expected:
            raise FingerprintError("fingerprint JSON is inconsistent with its components")
        return fp


def fingerprint(
    path: StrPath,
    *,
    kind: Kind = "model",
    mode: Mode = "full",
    cache_file: StrPath | None = None,
    threads: int | None = None,
    serving: Mapping[str, Any] | None = None,
) -> Fingerprint:
    """Fingerprint the model (or, with kind="adapter", LoRA adapter) directory `path`.

    `serving`: the serving options the operator declared (load_serving_config), a
    component of their own; without them a fingerprint is what it always was.

    mode="full" (the default) hashes every byte with BLAKE3, memoised in `cache_file`
    when given; mode="fast" hashes names, dtypes, shapes and sampled bytes of every tensor
    (it can miss an edit of a few rows: an explicit opt-in)
    (see default_cache_file()). `threads`: most threads reading at once; default: all
    cores but at least FULL_MIN_THREADS in full mode, FAST_COLD_THREADS in fast mode
    (which reads on one thread while the page cache is warm). Blocking; call
    fingerprint_async from a coroutine. Raises FingerprintError.
    """
    if mode not in get_args(Mode):
        raise FingerprintError(f"mode must be 'fast' or 'full', not {mode!r}")
    if kind not in get_args(Kind):
        raise FingerprintError(f"kind must be 'model' or 'adapter', not {kind!r}")
    root = Path(path)
    if not root.is_dir():
        raise FingerprintError(f"{root}: not a directory")
    memo = Memo(cache_file) if cache_file is not None and mode == "full" else None
    if threads is None:
        # Full mode is CPU-bound warm (a thread per core) but I/O-bound cold, where a few
        # more reads in flight than 2 cores measured faster; cold fast mode waits on I/O
        # latency only, so many reads in flight pay off.
        cores = os.cpu_count() or 1
        threads = max(FULL_MIN_THREADS, cores) if mode == "full" else FAST_COLD_THREADS
    config = config_digest(root, "adapter_config.json" if kind == "adapter" else "config.json")
    shards, index = (adapter_shards(root), None) if kind == "adapter" else model_shards(root)
    weights = weights_digest(shards, index, mode, memo, max(1, threads))
    weights_value, tensors, nbytes = weights.digest, weights.tensors, weights.nbytes
    extras = extra_weight_files(root, kind, index)
    if extras:
        # Each extra file is digested on its own (its tensor names may repeat the shards')
        # and mixed in by name; without extras the component is the shards' digest as before.
        hasher = keyed_hasher(f"weights+extra {mode}")
        hasher.update(frame(weights.digest.encode()))
        for path in extras:
            extra = weights_digest([path], None, mode, memo, max(1, threads))
            hasher.update(frame(path.name.encode(), extra.digest.encode()))
            tensors, nbytes = tensors + extra.tensors, nbytes + extra.nbytes
        weights_value = hasher.hexdigest()
    components = {
        "config": config,
        "generation_config": generation_config_digest(root),
        "tokenizer": tokenizer_digest(root),
        "weights": weights_value,
        "serving": serving_digest(serving),
    }
    return Fingerprint(
        value=_combine(kind, mode, components),
        kind=kind,
        mode=mode,
        tensors=tensors,
        weight_bytes=nbytes,
        **components,
    )


async def fingerprint_async(
    path: StrPath,
    *,
    kind: Kind = "model",
    mode: Mode = "full",
    cache_file: StrPath | None = None,
    threads: int | None = None,
    serving: Mapping[str, Any] | None = None,
) -> Fingerprint:
    """fingerprint() on a worker thread, so the event loop never blocks on disk or hashing."""
    return await asyncio.to_thread(
        fingerprint,
        path,
        kind=kind,
        mode=mode,
        cache_file=cache_file,
        threads=threads,
        serving=serving,
    )


def pod_fingerprint(
    model_path: StrPath,
    *,
    mode: Mode = "full",
    cache_file: StrPath | None = None,
    serving_config: StrPath | None = None,
) -> Fingerprint:
    """The model fingerprint a pod declares: its model directory plus the serving-config
    file the operator declares (INFERCACHE_SERVING_CONFIG), if any.

    The sidecar started with --model-path and the vLLM connector both call this with the
    same inputs, so they agree by construction; `cache_file` (the full-mode memo) only
    saves time, never changes the value. Blocking; raises FingerprintError.
    """
    serving = load_serving_config(serving_config) if serving_config else None
    return fingerprint(model_path, mode=mode, cache_file=cache_file, serving=serving)


def detect_kind(path: StrPath) -> Kind:
    """ "adapter" for a directory with adapter_config.json and no config.json, else "model"."""
    root = Path(path)
    is_adapter = (root / "adapter_config.json").exists() and not (root / "config.json").exists()
    return "adapter" if is_adapter else "model"


def diff(a: Fingerprint, b: Fingerprint) -> tuple[str, ...]:
    """Names of the components that differ between `a` and `b`, in COMPONENTS order.

    FingerprintError if they are of different kinds or modes (their digests are not comparable).
    """
    if (a.kind, a.mode) != (b.kind, b.mode):
        raise FingerprintError(
            f"cannot compare a {a.mode} {a.kind} fingerprint with a {b.mode} {b.kind} one"
        )
    return tuple(n for n in COMPONENTS if getattr(a, n) != getattr(b, n))


def default_cache_file(environ: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/infercache/fingerprints.json, else ~/.cache/infercache/fingerprints.json.

    Takes the environment as an argument: only entry points read os.environ.
    """
    xdg = environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says to ignore relative values.
    base = Path(xdg) if os.path.isabs(xdg) else _home(environ) / ".cache"
    return base / "infercache" / "fingerprints.json"


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


def _combine(kind: str, mode: str, components: Mapping[str, str]) -> str:
    # Declared serving options are framed in only when present, so every fingerprint
    # taken without them keeps its value.
    names = COMPONENTS if components.get("serving", ABSENT) != ABSENT else COMPONENTS[:-1]
    hasher = keyed_hasher("fingerprint")
    hasher.update(frame(kind.encode(), mode.encode(), *(components[n].encode() for n in names)))
    return PREFIX + hasher.hexdigest()
