"""`infercache fingerprint`: print or compare model fingerprints.

    infercache fingerprint PATH [--mode fast|full] [--json] [--cache-file F | --no-cache]
        [--threads N] [--serving-config S]
    infercache fingerprint --diff A B [--mode fast|full] [--json] [--threads N]
        [--serving-config SA SB]

--serving-config names the serving-options file(s) the pod declares
(INFERCACHE_SERVING_CONFIG): one for PATH, one per side for --diff, whose
`serving` component then shows a change of --dtype, --max-model-len, ...

PATH may be a model directory or a LoRA adapter directory (adapter_config.json
and no config.json). Exit status: 0 on success (whether or not --diff found a
difference), 2 on bad input with a one-line message on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infercache_client.fingerprint import (
    Fingerprint,
    FingerprintError,
    default_cache_file,
    detect_kind,
    diff,
    fingerprint,
    load_serving_config,
)

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `fingerprint` subcommand on `subparsers`."""
    parser = subparsers.add_parser(
        "fingerprint",
        help="print the fingerprint of a model or adapter directory",
        description="Fingerprint a model (or LoRA adapter) directory, or compare two.",
        usage=(
            "%(prog)s PATH [--mode fast|full] [--json] [--cache-file F | --no-cache] "
            "[--threads N]\n"
            "       %(prog)s --diff A B [--mode fast|full] [--json] [--threads N]"
        ),
    )
    parser.add_argument("path", nargs="?", metavar="PATH", help="model or adapter directory")
    parser.add_argument(
        "--diff", nargs=2, metavar=("A", "B"), help="compare two directories component by component"
    )
    parser.add_argument(
        "--mode",
        choices=("fast", "full"),
        default="full",
        help="full: BLAKE3 of every byte (default); fast: sampled tensor bytes",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-file",
        metavar="F",
        help="full-mode memo file (default $XDG_CACHE_HOME/infercache/fingerprints.json)",
    )
    cache.add_argument("--no-cache", action="store_true", help="full mode: rehash, no memo")
    parser.add_argument(
        "--serving-config",
        nargs="+",
        metavar="S",
        help="serving-options JSON file (one, or one per side with --diff)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="most threads reading at once (default: full mode max(4, cores), fast mode 16)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the subcommand; returns the process exit status."""
    if (args.path is None) == (args.diff is None):
        return _fail("give exactly one of PATH or --diff A B")
    if args.threads is not None and args.threads < 1:
        return _fail("--threads must be at least 1")
    cache_file: str | Path | None = None
    if not args.no_cache:
        cache_file = args.cache_file or default_cache_file(os.environ)
    sides = 1 if args.diff is None else 2
    if args.serving_config is not None and len(args.serving_config) != sides:
        return _fail(f"--serving-config takes {sides} file(s) here")
    try:
        serving: list[dict[str, Any] | None] = [None] * sides
        if args.serving_config is not None:
            serving = [load_serving_config(f) for f in args.serving_config]
        if args.diff is None:
            fp = _compute(args.path, args.mode, cache_file, args.threads, serving[0])
            print(fp.to_json() if args.json else fp.value)
            return EXIT_OK
        a, b = (
            _compute(p, args.mode, cache_file, args.threads, s)
            for p, s in zip(args.diff, serving, strict=True)
        )
        changed = diff(a, b)
    except FingerprintError as exc:
        return _fail(str(exc))
    if args.json:
        doc = {"a": a.as_dict(), "b": b.as_dict(), "changed": list(changed)}
        print(json.dumps(doc, sort_keys=True))
    else:
        print(f"A {a.value}  {args.diff[0]}")
        print(f"B {b.value}  {args.diff[1]}")
        print("changed: " + (", ".join(changed) if changed else "nothing (identical)"))
    return EXIT_OK


def _compute(
    path: str,
    mode: str,
    cache_file: str | Path | None,
    threads: int | None,
    serving: Mapping[str, Any] | None,
) -> Fingerprint:
    return fingerprint(
        path,
        kind=detect_kind(path),
        mode="full" if mode == "full" else "fast",
        cache_file=cache_file,
        threads=threads,
        serving=serving,
    )


def _fail(message: str) -> int:
    # One line, whatever the exception text contained.
    print("infercache fingerprint: error: " + " ".join(message.split()), file=sys.stderr)
    return EXIT_BAD_INPUT
