"""The command line shared by the scripts that write a generated section into a document.

Each script supplies its splice (the text with the fresh section between its
markers); this runs `SCRIPT [--check] [FILE]`: write FILE, or with --check exit 1
when it is stale.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def regenerate(
    description: str | None, default: Path, splice: Callable[[str], str], what: str, target: str
) -> int:
    """Regenerate (or, with --check, verify) `what` in FILE; `target` is the make target."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="fail instead of writing")
    parser.add_argument("file", nargs="?", type=Path, default=default)
    args = parser.parse_args()
    text = args.file.read_text(encoding="utf-8")
    fresh = splice(text)
    if fresh == text:
        return 0
    if args.check:
        print(f"{args.file}: {what} is stale; run `make {target}`")
        return 1
    args.file.write_text(fresh, encoding="utf-8")
    print(f"{args.file}: {what} regenerated")
    return 0
