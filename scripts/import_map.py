"""The sidecar's import map: modules, edges, cycles, layer violations, largest modules.

    python scripts/import_map.py [--check] [--json]

Reads `sidecar/` with `ast` (no import is executed). A box is a top-level package
(`sidecar/results/`) or a loose top-level module (`sidecar/keys.py`). Layers are
the architecture's reading order (docs/architecture.md): a box may import boxes of
its own layer or lower ones; an import of a higher layer is an upward edge.
Imports under `if TYPE_CHECKING:` count too: they are design dependencies all the
same. `--check` exits 1 on a cycle between modules or boxes, an upward edge, or a
hand-written module over the size limit.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "sidecar"
MAX_LINES = 400
# Hand-written modules allowed past MAX_LINES (none: keys.py, once the one exception,
# is split into key_types.py, key_input.py and itself).
SIZE_EXEMPT: set[str] = set()

# Highest first. Boxes in one tuple may import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli", "testing"),
    ("host",),
    ("server", "gateway"),
    ("app", "app_kv"),
    ("api", "backends", "fleet"),
    ("prewarm", "shadow"),
    ("wire",),
    ("results",),
    ("invalidation",),
    ("observability", "policy", "verification"),
    ("identity", "config", "tiers", "events"),
    ("kv", "keys", "key_input", "key_types", "key_surface", "key_records"),
    ("entries", "errors"),
    ("macs",),
    ("__init__",),
)
RANK = {box: i for i, layer in enumerate(LAYERS) for box in layer}
# Transport at the edge: a third-party package and the modules (or packages, by
# prefix) allowed to import it. The CLI and testing.py are gRPC clients.
EDGES: dict[str, tuple[str, ...]] = {
    "redis": ("sidecar.backends.redis",),
    "grpc": ("sidecar.api", "sidecar.server", "sidecar.cli", "sidecar.testing"),
    "grpc_health": ("sidecar.api", "sidecar.server", "sidecar.cli", "sidecar.testing"),
    "grpc_reflection": ("sidecar.server",),
    "torch": ("sidecar.kv.torch_pool",),
    "uvicorn": ("sidecar.gateway",),
    "httptools": ("sidecar.gateway.upstream_conn",),
    "httpx": ("sidecar.prewarm.upstream",),
    # The `events` extra: the KV event publisher alone (app.py imports it when enabled).
    "zmq": ("sidecar.events.publisher",),
    "msgspec": ("sidecar.events.publisher",),
}

# Pure packages: no I/O and no HTTP types, whatever the layers allow. The wire formats
# are read by the gateway (HTTP) and by prewarm alike, so they raise domain errors and
# never touch a socket or an HTTP library.
PURE: dict[str, tuple[str, ...]] = {
    "sidecar.wire": (
        "asyncio",
        "socket",
        "ssl",
        "http",
        "urllib.request",
        "httpx",
        "httptools",
        "uvicorn",
        "starlette",
        "aiohttp",
        "grpc",
        "redis",
        "sidecar.gateway",
        "sidecar.api",
        "sidecar.backends",
    ),
}


def module_name(path: Path) -> str:
    """Dotted module name of a file under sidecar/."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def box_of(module: str) -> str:
    """The top-level package or loose module a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The sidecar modules a file imports (a `from pkg import mod` names the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("sidecar") and name != "sidecar":
                found.add(name)
    return found


def edge_violations(path: Path, module: str) -> list[str]:
    """Imports of an edge package (EDGES) from a module not allowed to import it, and of
    anything a pure package (PURE) may not import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            for pure, banned in PURE.items():
                if (module == pure or module.startswith(pure + ".")) and any(
                    name == b or name.startswith(b + ".") for b in banned
                ):
                    found.append(f"{module} imports {name} (a pure package)")
            allowed = EDGES.get(name.split(".")[0])
            if allowed is not None and not any(
                module == a or module.startswith(a + ".") for a in allowed
            ):
                found.append(f"{module} imports {name}")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def hand_written(paths: Iterable[Path]) -> list[Path]:
    """Every .py file under sidecar/ (generated code lives in the client distribution)."""
    return sorted(p for p in paths if "__pycache__" not in p.parts)


def measure() -> dict[str, object]:
    """The numbers of the import map."""
    files = hand_written(ROOT.rglob("*.py"))
    by_module = {module_name(p): p for p in files}
    modules = set(by_module)
    graph = {m: imports_of(p, modules) - {m} for m, p in by_module.items()}
    edges = sorted((a, b) for a, bs in graph.items() for b in bs)
    boxes: dict[str, set[str]] = {}
    for a, b in edges:
        if box_of(a) != box_of(b):
            boxes.setdefault(box_of(a), set()).add(box_of(b))
    all_boxes = sorted({box_of(m) for m in modules})
    upward = sorted(
        (a, b)
        for a, b in edges
        if box_of(a) != box_of(b) and RANK.get(box_of(b), 99) < RANK.get(box_of(a), 99)
    )
    unranked = sorted(b for b in all_boxes if b not in RANK)
    sizes = sorted(
        ((len(p.read_text().splitlines()), m) for m, p in by_module.items()), reverse=True
    )
    loose = sorted(m for m, p in by_module.items() if p.parent == ROOT and m != "sidecar")
    return {
        "modules": len(modules),
        "module_edges": len(edges),
        "boxes": len(all_boxes),
        "box_edges": sum(len(v) for v in boxes.values()),
        "loose_top_modules": len(loose),
        "module_cycles": cycles(graph),
        "box_cycles": cycles(boxes),
        "upward_edges": [f"{a} -> {b}" for a, b in upward],
        "unranked_boxes": unranked,
        "edge_violations": [v for m, p in by_module.items() for v in edge_violations(p, m)],
        "largest": [f"{m} {n}" for n, m in sizes[:5]],
        "over_limit": [f"{m} {n}" for n, m in sizes if n > MAX_LINES and m not in SIZE_EXEMPT],
    }


def main(argv: list[str] | None = None) -> int:
    """Print the map's numbers; with --check, fail on what the layout forbids."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a violation")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    found = measure()
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for name, value in found.items():
            if isinstance(value, list):
                print(f"{name}: {len(value)}")
                for item in value:
                    print(f"  {item}")
            else:
                print(f"{name}: {value}")
    bad = any(
        found[k]
        for k in (
            "module_cycles",
            "box_cycles",
            "upward_edges",
            "unranked_boxes",
            "edge_violations",
        )
    ) or bool(found["over_limit"])
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
