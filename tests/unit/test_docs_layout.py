"""docs/architecture.md's package table matches the sidecar's packages and their docstrings."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SCRIPT = [sys.executable, str(ROOT / "scripts" / "gen_layout.py")]
ROW = re.compile(r"^\| (\d+) \| `(sidecar/[^`]+)` \| (.*) \|$")


def table_rows() -> dict[str, str]:
    """Name -> role of every row between the layout markers of the architecture doc."""
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index("<!-- layout:begin") : text.index("<!-- layout:end -->")]
    return {m[2]: m[3] for line in block.splitlines() if (m := ROW.match(line))}


def docstring_line(path: Path) -> str:
    """First paragraph of a module's docstring, on one line (what the table shows)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def test_every_package_is_in_the_table_with_its_docstring() -> None:
    """Each package under sidecar/ (nested ones too) has a row whose role is the first
    paragraph of its __init__ docstring, and each package states its role."""
    rows = table_rows()
    for init in sorted((ROOT / "sidecar").rglob("__init__.py")):
        if "__pycache__" in init.parts or init.parent.name == "sidecar":
            continue
        name = f"sidecar/{init.parent.relative_to(ROOT / 'sidecar').as_posix()}/"
        line = docstring_line(init)
        assert line, f"{name}__init__.py has no docstring stating the package's role"
        assert name in rows, f"{name} missing from docs/architecture.md; run `make docs-layout`"
        assert rows[name] == line.replace("|", "\\|"), f"{name}: stale; run `make docs-layout`"


def test_every_loose_module_is_in_the_table() -> None:
    """Each module at the top of sidecar/ has a row with its docstring's first paragraph."""
    rows = table_rows()
    for module in sorted((ROOT / "sidecar").glob("*.py")):
        name = f"sidecar/{module.name}"
        assert name in rows, f"{name} missing from docs/architecture.md; run `make docs-layout`"
        assert rows[name] == docstring_line(module).replace("|", "\\|"), name


def test_no_row_names_a_package_that_is_gone() -> None:
    """Every row of the table names a package or module that exists."""
    for name in table_rows():
        assert (ROOT / name).exists(), f"{name} is in docs/architecture.md but not in the tree"


def test_gen_layout_check_catches_a_stale_table(tmp_path: Path) -> None:
    """scripts/gen_layout.py --check passes on the doc and fails on an edited row;
    without --check it regenerates the table."""
    assert subprocess.run([*SCRIPT, "--check"], capture_output=True).returncode == 0
    text = DOC.read_text(encoding="utf-8")
    stale = tmp_path / "architecture.md"
    stale.write_text(text.replace("The sidecar's one exception tree.", "Errors."), "utf-8")
    assert subprocess.run([*SCRIPT, "--check", str(stale)], capture_output=True).returncode == 1
    assert subprocess.run([*SCRIPT, str(stale)], capture_output=True).returncode == 0
    assert stale.read_text(encoding="utf-8") == text
