#!/usr/bin/env python3
"""`infercache serve` with the freshness/invalidation check taken out (benchmarks only).

bench/invalidate.py runs this next to a normal sidecar to measure what the check costs
a hot hit. Before the server starts it replaces

- `Freshness.confirmed` with a function that always says True (hot hits never wait for
  a confirmed rule set), and
- `RuleSet.is_dead` with a function that always says False (no entry is ever dead),

so every lookup, store and reclaim in this process skips the check. What remains is one
call to a trivial function where the real check was: the closest to "compiled out" that
is possible without editing sidecar/. Never run this in front of real traffic: it serves
invalidated results.

    .venv/bin/python bench/sidecar_without_freshness.py --listen 127.0.0.1:50061 ...

takes exactly the flags of `infercache serve`.
"""

from __future__ import annotations

import sys


def _always_confirmed(self: object) -> bool:
    return True


def _never_dead(self: object, dims: tuple[str, str, str, str], entry_epoch: int) -> bool:
    return False


def main(argv: list[str]) -> int:
    """Patch the check out, then run `infercache serve` with `argv`."""
    from sidecar.cli import main as cli
    from sidecar.invalidation.freshness import Freshness
    from sidecar.invalidation.rules import RuleSet

    setattr(Freshness, "confirmed", _always_confirmed)  # noqa: B010 (mypy: method assign)
    setattr(RuleSet, "is_dead", _never_dead)  # noqa: B010
    return cli.main(["serve", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
