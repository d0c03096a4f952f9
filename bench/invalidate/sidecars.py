"""What both halves of the invalidation benchmark share: the sidecars (data and admin
planes on free ports, /metrics off), the bench's admin token name, and the unrelated
invalidation rules spread over the selector shapes."""

from __future__ import annotations

import itertools
import math

from bench.harness.procs import ServerProc, SidecarPorts, SidecarSpec

ADMIN_NAME = "bench"
KEY_PREFIX = "ic:v2:"
DIMENSIONS = ("tenant", "model_version", "adapter_version", "prompt_version")
WITHOUT_FRESHNESS = "bench.invalidate.without_freshness"


def sidecar_server(
    name: str, token: str, uvloop: bool, *flags: str, without_check: bool = False
) -> ServerProc:
    """A real sidecar (or the launcher without the freshness check) with its data and
    admin planes on free ports; ports[0] is the data plane, ports[1] the admin plane."""
    return SidecarSpec(
        name,
        ports=SidecarPorts.free(admin=True),
        flags=["--admin-tokens", f"{ADMIN_NAME}={token}", *flags],
        uvloop=uvloop,
        module=WITHOUT_FRESHNESS if without_check else "sidecar",
    ).proc()


def label(n: int) -> str:
    """1000 -> "1e3"; other sizes as plain numbers."""
    exp = round(math.log10(n)) if n > 0 else 0
    return f"1e{exp}" if 10**exp == n else str(n)


def rule_shapes() -> list[tuple[bool, bool, bool, bool]]:
    """The 15 selector shapes (constrained dimensions), fewest dimensions first."""
    shapes = [
        (a, b, c, d)
        for a, b, c, d in itertools.product((False, True), repeat=4)
        if a or b or c or d
    ]
    return sorted(shapes, key=lambda s: (sum(s), [not x for x in s]))


def unrelated_selectors(n: int, n_shapes: int) -> list[dict[str, str]]:
    """n selectors cycling over the first n_shapes shapes; none matches a bench key."""
    shapes = rule_shapes()[:n_shapes]
    return [
        {
            d: f"unrelated-{i}"
            for d, on in zip(DIMENSIONS, shapes[i % len(shapes)], strict=True)
            if on
        }
        for i in range(n)
    ]
