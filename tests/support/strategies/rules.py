"""Invalidation: entry dimensions, selectors and rules over small pools; clock steps."""

from __future__ import annotations

from hypothesis import strategies as st

from sidecar.invalidation.rules import Rule, Selector

# --- Invalidation: selectors, dimensions and rules over small pools -------------------
# Pools are tiny so that drawn selectors and entries match each other often.

TENANT_POOL = ("t1", "t2")
MODEL_POOL = ("m1", "m2")
ADAPTER_POOL = ("", "a1")
"""Entries may have no adapter (""); a selector can only name a non-empty one."""
PROMPT_POOL = ("p1", "p2")


def entry_dims() -> st.SearchStrategy[tuple[str, str, str, str]]:
    """(tenant, model_version, adapter_version, prompt_version) of an entry."""
    return st.tuples(
        st.sampled_from(TENANT_POOL),
        st.sampled_from(MODEL_POOL),
        st.sampled_from(ADAPTER_POOL),
        st.sampled_from(PROMPT_POOL),
    )


@st.composite
def selectors(draw: st.DrawFn) -> Selector:
    """A valid Selector: `all`, or one to four constrained dimensions from the pools."""
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        return Selector(all=True)
    pools = (TENANT_POOL, MODEL_POOL, tuple(a for a in ADAPTER_POOL if a), PROMPT_POOL)
    values = [draw(st.none() | st.sampled_from(pool)) for pool in pools]
    if all(v is None for v in values):
        i = draw(st.integers(min_value=0, max_value=3))
        values[i] = draw(st.sampled_from(pools[i]))
    return Selector(values[0], values[1], values[2], values[3])


@st.composite
def rule_lists(draw: st.DrawFn, max_size: int = 12) -> list[Rule]:
    """Rules with distinct epochs (in random order) and commit times."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    epochs = draw(st.permutations(range(1, n + 1)))
    return [
        Rule(e, draw(selectors()), draw(st.integers(min_value=0, max_value=10_000))) for e in epochs
    ]


# --- Invalidation state machine: time steps and requested TTLs -------------------------------

CLOCK_STEPS_MS = (1, 999, 1_000, 4_999, 30_000, 60_000, 61_000, 301_000)
"""Around the boundaries the state machine uses: 1 s and 5 s TTLs, the 60 s lease, the
120 s TTL cap and the 300 s unleased window."""


def clock_steps_ms() -> st.SearchStrategy[int]:
    """How far a test clock moves in one step, in milliseconds."""
    return st.sampled_from(CLOCK_STEPS_MS)


def requested_ttls_s() -> st.SearchStrategy[int]:
    """A Store's ttl_seconds: 0 (the default), short ones, and one above the cap."""
    return st.sampled_from((0, 1, 5, 200))
