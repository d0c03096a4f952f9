"""Cacheability policy: every rule, per-tenant overrides, TTL precedence, file validation."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.keys import InputKind, KeyRequest, Sampling, build_key
from sidecar.policy.cacheability import (
    NO_TRAITS,
    BypassReason,
    Policy,
    RequestTraits,
    TenantPolicy,
)
from sidecar.policy.file import PolicyBounds, PolicyError, parse_policy, read_policy_file
from sidecar.policy.ttl import TtlPolicy

POLICY_DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


@dataclass(frozen=True)
class Facts:
    """A KeyFacts stand-in: only what the policy reads."""

    tenant: str = "acme"
    temperature: float = 0.0
    seeded: bool = False
    tools: bool = False


R = BypassReason
SIDE = RequestTraits(side_effects=True)
PRIVATE = RequestTraits(private_data=True)
LIVE = RequestTraits(real_time=True)
TOOLS = RequestTraits(tools=True)

# (policy, key facts, declared traits, expected reason or None)
RULES: list[tuple[str, TenantPolicy, Facts, RequestTraits, BypassReason | None]] = [
    ("built-in: plain request cached", TenantPolicy(), Facts(), NO_TRAITS, None),
    ("built-in: sampled request cached", TenantPolicy(), Facts(temperature=1.0), NO_TRAITS, None),
    ("not cacheable", TenantPolicy(cacheable=False), Facts(), NO_TRAITS, R.NOT_CACHEABLE),
    (
        "not cacheable wins over traits",
        TenantPolicy(cacheable=False),
        Facts(),
        SIDE,
        R.NOT_CACHEABLE,
    ),
    ("side effects declared", TenantPolicy(), Facts(), SIDE, R.SIDE_EFFECTS),
    (
        "side effects allowed",
        TenantPolicy(bypass_side_effects=False),
        Facts(),
        SIDE,
        None,
    ),
    ("private data declared", TenantPolicy(), Facts(), PRIVATE, R.PRIVATE_DATA),
    (
        "private data allowed",
        TenantPolicy(bypass_private_data=False),
        Facts(),
        PRIVATE,
        None,
    ),
    ("real time declared", TenantPolicy(), Facts(), LIVE, R.REAL_TIME),
    ("real time allowed", TenantPolicy(bypass_real_time=False), Facts(), LIVE, None),
    ("tools declared, rule off (built-in)", TenantPolicy(), Facts(), TOOLS, None),
    ("tools declared, rule on", TenantPolicy(bypass_tools=True), Facts(), TOOLS, R.TOOLS),
    (
        "tools in the key, rule on",
        TenantPolicy(bypass_tools=True),
        Facts(tools=True),
        NO_TRAITS,
        R.TOOLS,
    ),
    ("tools in the key, rule off", TenantPolicy(), Facts(tools=True), NO_TRAITS, None),
    (
        "deterministic only: temperature > 0 without seed",
        TenantPolicy(deterministic_only=True),
        Facts(temperature=0.7),
        NO_TRAITS,
        R.NON_DETERMINISTIC,
    ),
    (
        "deterministic only: seeded sampling is cached",
        TenantPolicy(deterministic_only=True),
        Facts(temperature=0.7, seeded=True),
        NO_TRAITS,
        None,
    ),
    (
        "deterministic only: greedy is cached",
        TenantPolicy(deterministic_only=True),
        Facts(temperature=0.0),
        NO_TRAITS,
        None,
    ),
    (
        "first matching rule reported: side effects before tools",
        TenantPolicy(bypass_tools=True),
        Facts(tools=True),
        SIDE,
        R.SIDE_EFFECTS,
    ),
    (
        "all traits at once, only tools rule on",
        TenantPolicy(
            bypass_side_effects=False,
            bypass_private_data=False,
            bypass_real_time=False,
            bypass_tools=True,
        ),
        Facts(),
        RequestTraits(True, True, True, True),
        R.TOOLS,
    ),
]


@pytest.mark.parametrize(("policy", "facts", "traits", "expected"), [r[1:] for r in RULES],
                         ids=[r[0] for r in RULES])  # fmt: skip
def test_bypass_rules(
    policy: TenantPolicy, facts: Facts, traits: RequestTraits, expected: BypassReason | None
) -> None:
    """Each rule bypasses exactly the requests it names, with its machine-readable reason."""
    decision = policy.bypass_for(facts, traits)
    assert (decision.reason if decision else None) is expected
    if decision is not None:
        assert decision.detail


def test_unset_temperature_means_the_default_one_and_is_not_deterministic() -> None:
    """A key without a temperature carries 1.0: deterministic_only bypasses it, not seed or 0."""
    policy = TenantPolicy(deterministic_only=True)

    def facts(**sampling: Any) -> Any:
        req = KeyRequest("acme", "m1", "p1", "hi", InputKind.TEXT, sampling=Sampling(**sampling))
        return build_key(req)

    unset = policy.bypass_for(facts())
    assert unset is not None
    assert unset.reason is R.NON_DETERMINISTIC
    assert policy.bypass_for(facts(seed=7)) is None
    assert policy.bypass_for(facts(temperature=0.0)) is None
    assert policy.bypass_for(facts(temperature=-0.0)) is None


@pytest.mark.parametrize(
    ("extra", "tools"),
    [
        ({}, False),
        ({"tools": "sha256:ab"}, True),
        ({"Tool_Schema_Version": "v3"}, True),
        ({"functions": "x"}, True),
        ({"tool_choice": "auto"}, True),
        ({"corpus": "2024-05", "toolsmith": "x"}, False),
    ],
)
def test_keys_detect_tools_from_extra(extra: dict[str, str], tools: bool) -> None:
    """An `extra` entry naming a tool schema marks the key as carrying tools."""
    req = KeyRequest("acme", "m1", "p1", "hi", InputKind.TEXT, extra=extra)
    assert build_key(req).tools is tools


def test_entry_size_rule() -> None:
    """max_entry_bytes bypasses only larger results; unset means no policy limit."""
    assert TenantPolicy().bypass_for_entry(10**9) is None
    capped = TenantPolicy(max_entry_bytes=100)
    assert capped.bypass_for_entry(100) is None
    too_big = capped.bypass_for_entry(101)
    assert too_big is not None
    assert too_big.reason is R.ENTRY_TOO_LARGE


OVERRIDES = """
defaults:
  cacheable: true
  deterministic_only: true
  default_ttl_s: 600
  max_ttl_s: 3600
  bypass: {tools: true, real_time: false}
  max_entry_bytes: 64KiB
tenants:
  billing:
    cacheable: false
  acme:
    deterministic_only: false
    max_ttl_s: 120
    retain_inputs: true
    bypass:
      real_time: true
"""


@pytest.mark.parametrize(
    ("tenant", "expected"),
    [
        (
            "someone-else",
            TenantPolicy(
                deterministic_only=True,
                default_ttl_s=600,
                max_ttl_s=3600,
                bypass_tools=True,
                bypass_real_time=False,
                max_entry_bytes=64 * 1024,
            ),
        ),
        (
            "billing",
            TenantPolicy(
                cacheable=False,
                deterministic_only=True,
                default_ttl_s=600,
                max_ttl_s=3600,
                bypass_tools=True,
                bypass_real_time=False,
                max_entry_bytes=64 * 1024,
            ),
        ),
        (
            "acme",
            TenantPolicy(
                deterministic_only=False,
                default_ttl_s=600,
                max_ttl_s=120,
                bypass_tools=True,
                bypass_real_time=True,
                max_entry_bytes=64 * 1024,
                retain_inputs=True,
            ),
        ),
    ],
)
def test_tenant_overrides_replace_only_the_fields_they_name(
    tenant: str, expected: TenantPolicy
) -> None:
    """A tenant block inherits every field of `defaults` it does not set itself."""
    assert parse_policy(OVERRIDES).for_tenant(tenant) == expected


def test_tenants_inherit_defaults_written_after_them() -> None:
    """The order of `tenants` and `defaults` in the file does not matter."""
    policy = parse_policy("tenants:\n  acme: {retain_inputs: true}\ndefaults:\n  max_ttl_s: 60\n")
    assert policy.for_tenant("acme") == TenantPolicy(max_ttl_s=60, retain_inputs=True)


def test_no_file_policy_caches_everything_and_retains_nothing() -> None:
    """The built-in policy: cacheable, settings' TTLs, declared traits bypass, no retention."""
    p = Policy().for_tenant("anyone")
    assert p == TenantPolicy()
    assert p.cacheable
    assert not p.deterministic_only
    assert not p.bypass_tools
    assert p.default_ttl_s is None
    assert p.max_ttl_s is None
    assert p.max_entry_bytes is None
    assert not p.retain_inputs
    assert p.bypass_for(Facts(temperature=1.0, tools=True)) is None


# requested, tenant policy, settings -> applied TTL
TTL_CASES: list[tuple[str, int, TenantPolicy, TtlPolicy, int]] = [
    ("settings default", 0, TenantPolicy(), TtlPolicy(3600, 86400), 3600),
    ("request wins", 120, TenantPolicy(default_ttl_s=600), TtlPolicy(3600, 86400), 120),
    ("policy default", 0, TenantPolicy(default_ttl_s=600), TtlPolicy(3600, 86400), 600),
    ("policy cap", 5000, TenantPolicy(max_ttl_s=300), TtlPolicy(3600, 86400), 300),
    (
        "policy default above policy cap is capped",
        0,
        TenantPolicy(default_ttl_s=600, max_ttl_s=300),
        TtlPolicy(3600, 86400),
        300,
    ),
    (
        "settings tenant cap lower than policy cap",
        5000,
        TenantPolicy(max_ttl_s=3000),
        TtlPolicy(3600, 86400, {"acme": 100}),
        100,
    ),
    (
        "policy cap lower than settings tenant cap",
        5000,
        TenantPolicy(max_ttl_s=50),
        TtlPolicy(3600, 86400, {"acme": 100}),
        50,
    ),
    ("global max", 10**6, TenantPolicy(), TtlPolicy(3600, 86400), 86400),
]


@pytest.mark.parametrize(("requested", "policy", "settings", "applied"),
                         [c[1:] for c in TTL_CASES], ids=[c[0] for c in TTL_CASES])  # fmt: skip
def test_ttl_precedence(
    requested: int, policy: TenantPolicy, settings: TtlPolicy, applied: int
) -> None:
    """Request, else policy default, else setting default; every maximum only lowers."""
    assert settings.effective("acme", requested, policy) == applied


# (document, line, field, problem fragment)
BAD_FILES: list[tuple[str, int | None, str, str]] = [
    ("defaults:\n  cacheable: 1\n", 2, "defaults.cacheable", "expected true or false"),
    ("defaults:\n  cacheable: 'yes'\n", 2, "defaults.cacheable", "expected true or false"),
    ("defaults:\n  max_ttl_s: -5\n", 2, "defaults.max_ttl_s", "positive integer"),
    ("defaults:\n  max_ttl_s: 0\n", 2, "defaults.max_ttl_s", "positive integer"),
    ("defaults:\n  default_ttl_s: 1.5\n", 2, "defaults.default_ttl_s", "positive integer"),
    ("defaults:\n  max_ttl_s: 90000\n", 2, "defaults.max_ttl_s", "INFERCACHE_MAX_TTL_S"),
    (
        "defaults:\n  max_ttl_s: 60\n  default_ttl_s: 120\n",
        3,
        "defaults.default_ttl_s",
        "exceeds max_ttl_s",
    ),
    ("defaults:\n  max_entry_bytes: lots\n", 2, "defaults.max_entry_bytes", "size"),
    ("defaults:\n  max_entry_bytes: 0\n", 2, "defaults.max_entry_bytes", "positive"),
    ("defaults:\n  max_entry_bytes: 5MiB\n", 2, "defaults.max_entry_bytes", "MAX_PAYLOAD"),
    ("defaults:\n  cachable: true\n", 2, "defaults.cachable", "unknown key 'cachable'"),
    ("defaults:\n  bypass:\n    email: true\n", 3, "defaults.bypass.email", "unknown key"),
    ("defaults:\n  bypass: true\n", 2, "defaults.bypass", "expected a mapping"),
    ("defaults:\n  bypass:\n    tools: on-ish\n", 3, "defaults.bypass.tools", "true or false"),
    ("defaults: []\n", 1, "defaults", "expected a mapping"),
    ("tenants:\n  - acme\n", 2, "tenants", "expected a mapping"),
    (
        "tenants:\n  acme:\n    retain_inputs: maybe\n",
        3,
        "tenants.acme.retain_inputs",
        "true or false",
    ),
    (
        "tenants:\n  acme: {}\n  beta: {}\n  acme: {cacheable: false}\n",
        4,
        "tenants.acme",
        "twice (first on line 2)",
    ),
    ("tenants:\n  acme:\n    ttl: 5\n", 3, "tenants.acme.ttl", "unknown key 'ttl'"),
    ("tenants:\n  ' ': {}\n", 2, "tenants", "must not be empty"),
    ("tenant:\n  acme: {}\n", 1, "tenant", "unknown key 'tenant'"),
    ("version: 2\n", 1, "version", "only version 1"),
    ("defaults:\n  cacheable: true\n tenants: {}\n", 3, "", "not valid YAML"),
    ("- 1\n- 2\n", 1, "(top level)", "expected a mapping"),
    ("a: 1\n---\nb: 2\n", 2, "", "not valid YAML"),
    ("", None, "", "is empty"),
]


@pytest.mark.parametrize(("text", "line", "field", "problem"), BAD_FILES)
def test_invalid_files_name_the_line_and_field(
    text: str, line: int | None, field: str, problem: str
) -> None:
    """Unknown keys, wrong types and bad values are refused with file, line and dotted field."""
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.yaml", PolicyBounds(max_ttl_s=86400, max_entry_bytes=4 << 20))
    exc = err.value
    assert (exc.line, exc.field) == (line, field)
    assert problem in str(exc)
    where = f"policy.yaml:{line}: " if line is not None else "policy.yaml: "
    assert str(exc).startswith(where + (f"{field}: " if field else "")), str(exc)


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    """A missing or non-UTF-8 file is a PolicyError naming the path, not a crash."""
    with pytest.raises(PolicyError, match="cannot read"):
        read_policy_file(str(tmp_path / "missing.yaml"))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"defaults:\n  cacheable: \xff\n")
    with pytest.raises(PolicyError, match="not UTF-8"):
        read_policy_file(str(binary))


@pytest.mark.timeout(10)
def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    """A reload that finds a FIFO (or a directory) at the path refuses it at once: the
    open does not wait for a writer."""
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    with pytest.raises(PolicyError, match="is not a regular file"):
        read_policy_file(str(fifo))
    with pytest.raises(PolicyError, match=r"is not a regular file|cannot read"):
        read_policy_file(str(tmp_path))


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    """A policy file over the size limit is refused before it is parsed."""
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1024 * 1024) + "\ndefaults: {}\n")
    with pytest.raises(PolicyError, match="larger than"):
        read_policy_file(str(big))


def documented_policy() -> str:
    """The one ```yaml block of docs/policy.md (the documented policy file)."""
    blocks = re.findall(r"```yaml\n(.*?)```", POLICY_DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, f"expected one yaml block in docs/policy.md, found {len(blocks)}"
    text: str = blocks[0]
    return text


def test_documented_policy_example_loads_and_means_what_it_says() -> None:
    """docs/policy.md's complete example is a valid file whose tenants behave as described."""
    policy = parse_policy(documented_policy(), "docs/policy.md")
    defaults = policy.for_tenant("any-other-tenant")
    assert defaults.deterministic_only
    assert defaults.bypass_tools
    nondeterministic = defaults.bypass_for(Facts(temperature=0.7))
    assert nondeterministic is not None
    assert nondeterministic.reason is R.NON_DETERMINISTIC
    billing = policy.for_tenant("billing").bypass_for(Facts())
    assert billing is not None
    assert billing.reason is R.NOT_CACHEABLE
    acme = policy.for_tenant("acme")
    assert acme.retain_inputs
    assert not defaults.retain_inputs
    assert acme.max_ttl_s is not None
    assert defaults.max_ttl_s is not None
    assert acme.max_ttl_s < defaults.max_ttl_s


def test_every_reason_has_a_wire_code_and_one_label_everywhere() -> None:
    """Each BypassReason maps to its own proto code, whose span label is the stats label."""
    from sidecar.api.cache_codec import BYPASS_CODE
    from sidecar.api.observe import _bypass_label

    assert set(BYPASS_CODE) == set(BypassReason)
    assert len(set(BYPASS_CODE.values())) == len(BypassReason)
    for reason, code in BYPASS_CODE.items():
        assert code != 0
        assert _bypass_label(code) == reason.value


def test_inert_flag_follows_the_rules() -> None:
    """`inert` (only declared traits can bypass) is derived, also after replace()."""
    import dataclasses

    assert TenantPolicy().inert
    assert TenantPolicy(retain_inputs=True, max_ttl_s=5, bypass_side_effects=False).inert
    cases: list[dict[str, Any]] = [
        {"cacheable": False},
        {"deterministic_only": True},
        {"bypass_tools": True},
    ]
    for strict in cases:
        assert not TenantPolicy(**strict).inert, strict
        assert not dataclasses.replace(TenantPolicy(), **strict).inert, strict
    assert Policy().inert
    assert not parse_policy("tenants:\n  b: {cacheable: false}\n").inert
    assert not parse_policy("defaults: {bypass: {tools: true}}\n").inert
