"""`python -m sidecar.config --markdown`: print the generated configuration table."""

from __future__ import annotations

import argparse
import sys

from sidecar.config.table import markdown_table


def main() -> int:
    """Print the table (the only output there is, for now)."""
    parser = argparse.ArgumentParser(prog="python -m sidecar.config", description=__doc__)
    parser.add_argument("--markdown", action="store_true", required=True)
    parser.parse_args()
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
