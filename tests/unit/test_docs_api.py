"""docs/api.md and the README name every RPC the protos define."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos" / "infercache" / "v1"


def rpcs(proto: str) -> list[str]:
    """The RPC names a proto file declares, in order."""
    return re.findall(r"^\s*rpc (\w+)\(", (PROTOS / proto).read_text(encoding="utf-8"), re.M)


def table_names(path: Path) -> set[str]:
    """Every `Name` in the first column of the markdown tables of a file."""
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return names


def test_api_reference_has_a_row_for_every_rpc() -> None:
    """Each RPC of cache.proto, kv.proto and admin.proto is described in docs/api.md."""
    documented = table_names(ROOT / "docs" / "api.md")
    for proto in ("cache.proto", "kv.proto", "admin.proto"):
        found = rpcs(proto)
        assert found, f"no rpc found in {proto}"
        missing = [name for name in found if name not in documented]
        assert not missing, f"docs/api.md has no row for {proto}'s {missing}"


def test_readme_names_every_data_plane_rpc_and_points_to_the_reference() -> None:
    """The README's API summary names each CacheService RPC and links docs/api.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    summary = readme[readme.index("## API") : readme.index("## Cacheability policy")]
    assert "docs/api.md" in summary
    for name in rpcs("cache.proto"):
        assert f"`{name}`" in summary, f"README's API summary does not name {name}"
