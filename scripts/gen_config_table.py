"""Write the configuration table into README.md from the settings' declarations.

Usage: gen_config_table.py [--check] [FILE]

The table is generated (sidecar/config/table.py) between the config-table
markers of FILE (default README.md); --check exits 1 when FILE is stale
instead of writing it. `make config-table` runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from generated_section import regenerate

from sidecar.config.table import splice

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Regenerate (or, with --check, verify) the table in FILE."""
    return regenerate(__doc__, ROOT / "README.md", splice, "configuration table", "config-table")


if __name__ == "__main__":
    sys.exit(main())
