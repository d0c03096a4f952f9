"""README.md's Python examples, as the tests that run them read them."""

from __future__ import annotations

import re
from typing import Any

from tests.support.processes import REPO

README = REPO / "README.md"
DOCUMENTED_ADDRESS = "127.0.0.1:50051"
"""Where the examples talk to: the address `make run` listens on."""


def readme_examples() -> list[str]:
    """The ```python blocks of README.md: the unary example, then the streaming one."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 2, f"expected two python blocks in README.md, found {len(blocks)}"
    for code in blocks:
        assert DOCUMENTED_ADDRESS in code, "an example no longer talks to the `make run` address"
    return [str(b) for b in blocks]


def readme_example() -> str:
    """The first ```python block of README.md (Lookup / Store)."""
    return readme_examples()[0]


def run_example(code: str) -> dict[str, Any]:
    """Execute an example as a script; its globals afterwards."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace
