"""The report's pieces: table headers and the final `key=value` summary line.

The summary line is the last line a benchmark prints; docs/benchmarks.md quotes its
keys and `python -m bench.smoke` parses it (`parse_summary`).
"""

from __future__ import annotations

from collections.abc import Mapping


def print_head(head: str) -> None:
    """A table's header line and a rule of its width."""
    print(head)
    print("-" * len(head))


def fmt(value: object) -> str:
    """A summary value: floats with 3 decimals, everything else as str()."""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_line(pairs: Mapping[str, object]) -> str:
    """`k=v k=v ...` (values through fmt(); keys and values must hold no spaces)."""
    return " ".join(f"{k}={fmt(v)}" for k, v in pairs.items())


def print_summary(pairs: Mapping[str, object]) -> None:
    """Print the summary line (flushed: it is the line a caller waits for)."""
    print(summary_line(pairs), flush=True)


def parse_summary(line: str) -> dict[str, str]:
    """The pairs of a summary line; empty when any word is not `key=value`."""
    words = line.split()
    if not words or not all("=" in w and not w.startswith("=") for w in words):
        return {}
    return dict(w.split("=", 1) for w in words)
