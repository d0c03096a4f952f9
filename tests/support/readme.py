"""README.md's Python examples, as the tests that run them read them."""

from __future__ import annotations

import re
from typing import Any

from tests.support.processes import REPO

README = REPO / "README.md"
DOCUMENTED_ADDRESS = "127.0.0.1:50051"
"""Where the examples talk to: the address `make run` listens on."""


GATEWAY_ADDRESS = "127.0.0.1:8080"
"""Where the gateway example talks to (the README's --gateway-listen)."""


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def readme_examples() -> list[str]:
    """The gRPC ```python blocks of README.md: the unary example, then the streaming one."""
    blocks = [b for b in _python_blocks() if GATEWAY_ADDRESS not in b]
    assert len(blocks) == 2, f"expected two gRPC python blocks in README.md, found {len(blocks)}"
    for code in blocks:
        assert DOCUMENTED_ADDRESS in code, "an example no longer talks to the `make run` address"
    return [str(b) for b in blocks]


def readme_gateway_example(sdk: str = "openai") -> str:
    """The README's example of `sdk` (openai, anthropic) talking to the gateway."""
    [block] = [
        b
        for b in _python_blocks()
        if GATEWAY_ADDRESS in b and (f"from {sdk} import" in b or f"import {sdk}\n" in b)
    ]
    return str(block)


def readme_example() -> str:
    """The first ```python block of README.md (Lookup / Store)."""
    return readme_examples()[0]


def run_example(code: str) -> dict[str, Any]:
    """Execute an example as a script; its globals afterwards."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace
