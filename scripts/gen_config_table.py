"""Write the configuration table into README.md from the settings' declarations.

Usage: gen_config_table.py [--check] [FILE]

The table is generated (sidecar/config/table.py) between the config-table
markers of FILE (default README.md); --check exits 1 when FILE is stale
instead of writing it. `make config-table` runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sidecar.config.table import splice

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Regenerate (or, with --check, verify) the table in FILE."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail instead of writing")
    parser.add_argument("file", nargs="?", type=Path, default=ROOT / "README.md")
    args = parser.parse_args()
    text = args.file.read_text(encoding="utf-8")
    fresh = splice(text)
    if fresh == text:
        return 0
    if args.check:
        print(f"{args.file}: configuration table is stale; run `make config-table`")
        return 1
    args.file.write_text(fresh, encoding="utf-8")
    print(f"{args.file}: configuration table regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
