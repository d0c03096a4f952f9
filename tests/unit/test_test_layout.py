"""The suite's own layout: tests share code only through tests/support/ and sidecar.testing."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_DIRS = (REPO / "tests", REPO / "clients" / "python" / "tests")


def _python_files() -> list[Path]:
    return sorted(p for d in TEST_DIRS for p in d.rglob("*.py"))


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module a file imports; `from a import b` gives a.b too,
    since b may be a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}".lstrip(".")) for a in node.names]
    return found


def _breaks_the_rule(module: str) -> bool:
    """A test module, a conftest, a relative import, or anything of tests/ outside support."""
    if module.startswith("."):
        return True
    parts = module.split(".")
    if any(p == "conftest" or p.startswith("test_") for p in parts):
        return True
    return parts[0] == "tests" and len(parts) > 1 and parts[1] != "support"


def test_the_rule_itself() -> None:
    """What counts as importing another test module or a conftest."""
    for bad in ("tests.unit.test_cache", "tests.conftest", "conftest", "test_keys", ".helpers"):
        assert _breaks_the_rule(bad), bad
    for bad in ("tests.integration.helpers", "tests.e2e"):
        assert _breaks_the_rule(bad), bad
    for fine in ("tests", "tests.support.keys", "sidecar.testing", "pytest", "testing"):
        assert not _breaks_the_rule(fine), fine


def test_no_test_imports_another_test_module_or_a_conftest() -> None:
    """Shared test code lives in tests/support/ (or sidecar.testing), never in a test
    module or a conftest: importing those runs their fixtures and tests twice."""
    files = _python_files()
    assert len(files) > 50, "the walk found the suite"
    bad = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in files
        for line, module in _imported_modules(path)
        if _breaks_the_rule(module)
    ]
    assert not bad, "\n".join(bad)
