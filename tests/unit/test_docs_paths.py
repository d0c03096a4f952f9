"""The README and docs/ name only files and benchmark modules that exist.

Modules move (the re-house moved most of sidecar/); a path in prose is not
rewritten by a move script, so this catches the ones left behind. The dated
benchmark history is exempt: it records what the commands were then.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CURRENT = [d for d in DOCS if d.name != "benchmarks-history.md"]
TOP = "sidecar|docs|bench|scripts|tests|clients|deploy|protos|third_party"
REPO_PATH = re.compile(rf"`((?:{TOP})/[^`\s]*)`")
# `kv/movement.py` and the like: a module named relative to sidecar/
SIDECAR_PATH = re.compile(r"`((?:[a-z_]+/)+[a-z_]+\.py)`")
BENCH_MODULE = re.compile(r"python -m (bench(?:\.\w+)+)")


def named_paths(doc: Path) -> list[str]:
    """Repository paths written in backticks in a document (placeholders skipped)."""
    found = []
    for match in REPO_PATH.finditer(doc.read_text(encoding="utf-8")):
        path = match.group(1).split(":")[0].rstrip("/.,")
        if not any(c in path for c in "*<>{}"):
            found.append(path)
    return found


@pytest.mark.parametrize("doc", CURRENT, ids=lambda d: d.name)
def test_every_named_repository_path_exists(doc: Path) -> None:
    """Each `dir/...` path a document names is in the tree."""
    missing = [p for p in named_paths(doc) if not (ROOT / p).exists()]
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", CURRENT, ids=lambda d: d.name)
def test_every_short_module_path_exists_under_sidecar_or_the_repository(doc: Path) -> None:
    """A module named as `pkg/module.py` is a file under sidecar/ (or the repository root)."""
    text = doc.read_text(encoding="utf-8")
    missing = [
        p
        for p in SIDECAR_PATH.findall(text)
        if not (ROOT / "sidecar" / p).exists() and not (ROOT / p).exists()
    ]
    assert not missing, f"{doc.name} names modules that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_bench_command_names_a_runnable_module(doc: Path) -> None:
    """Each `python -m bench.x` in a document is a module or package with __main__."""
    for module in BENCH_MODULE.findall(doc.read_text(encoding="utf-8")):
        path = ROOT / module.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), module
