"""The policy file: YAML with defaults and per-tenant overrides, validated strictly.

    version: 1                # optional; 1 is the only version
    defaults:                 # every field optional; see TenantPolicy for meanings
      cacheable: true
      default_ttl_s: 3600
      max_ttl_s: 86400
      deterministic_only: false
      bypass: {side_effects: true, private_data: true, real_time: true, tools: false}
      max_entry_bytes: 1MiB   # bytes, or a size with KiB/MiB/GiB (KB/MB/GB)
      retain_inputs: false
      gateway_cache_mode: read-write   # the gateway's mode when a request names none
      verify_rate: 0.01       # hits re-computed and compared (docs/verification.md)
      verify_budget: 0.05     # excess divergence before a scope's hits stop
    tenants:
      acme: {max_ttl_s: 600, retain_inputs: true}   # only the named fields change

Unknown keys, wrong types, bad values and duplicate keys are errors that name the
line and the dotted field. The file is parsed node by node (yaml.compose) rather
than loaded into dicts, so every error keeps the line it comes from and a
duplicated key cannot silently replace the first one.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import yaml

from sidecar.config import Config, parse_bytes
from sidecar.policy.cacheability import GATEWAY_CACHE_MODES, Policy, TenantPolicy

MAX_POLICY_FILE_BYTES = 1024 * 1024
_TAG = "tag:yaml.org,2002:"
_BYPASS_FIELDS = {
    "side_effects": "bypass_side_effects",
    "private_data": "bypass_private_data",
    "real_time": "bypass_real_time",
    "tools": "bypass_tools",
}


class PolicyError(ValueError):
    """The policy file is invalid; the message names the file, line and field."""

    def __init__(self, source: str, line: int | None, field: str, problem: str) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")
        self.line = line
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class PolicyBounds:
    """Process-wide ceilings from the settings that no policy value may exceed."""

    max_ttl_s: int
    """INFERCACHE_MAX_TTL_S: it also bounds how long invalidation rules are kept."""
    max_entry_bytes: int
    """INFERCACHE_MAX_PAYLOAD_BYTES."""

    @classmethod
    def from_config(cls, config: Config) -> PolicyBounds:
        """The ceilings the configured settings set."""
        return cls(max_ttl_s=config.ttl.max_ttl_s, max_entry_bytes=config.limits.max_payload_bytes)


class _Reader:
    """Walks composed YAML nodes, turning each problem into a PolicyError with its line."""

    def __init__(self, source: str, bounds: PolicyBounds) -> None:
        self.source = source
        self.bounds = bounds
        self._scalars = yaml.constructor.SafeConstructor()

    def fail(self, node: yaml.Node | None, field: str, problem: str) -> PolicyError:
        line = node.start_mark.line + 1 if node is not None else None
        return PolicyError(self.source, line, field, problem)

    def mapping(self, node: yaml.Node, field: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """(key text, key node, value node) of a mapping, refusing duplicates."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field or "(top level)", f"expected a mapping, got {_kind(node)}")
        seen: dict[str, int] = {}
        out: list[tuple[str, yaml.Node, yaml.Node]] = []
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode) or k.tag == _TAG + "null":
                raise self.fail(k, field or "(top level)", "keys must be plain names")
            name = str(k.value)
            path = f"{field}.{name}" if field else name
            if name in seen:
                raise self.fail(k, path, f"appears twice (first on line {seen[name]})")
            seen[name] = k.start_mark.line + 1
            out.append((name, k, v))
        return out

    def boolean(self, node: yaml.Node, field: str) -> bool:
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "bool":
            return bool(self._scalars.construct_yaml_bool(node))
        raise self.fail(node, field, f"expected true or false, got {_kind(node)}")

    def positive_int(self, node: yaml.Node, field: str) -> int:
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "int":
            value = int(self._scalars.construct_yaml_int(node))
            if value > 0:
                return value
        raise self.fail(node, field, f"expected a positive integer, got {_kind(node)}")

    def ttl(self, node: yaml.Node, field: str) -> int:
        value = self.positive_int(node, field)
        if value > self.bounds.max_ttl_s:
            raise self.fail(
                node,
                field,
                f"{value} exceeds INFERCACHE_MAX_TTL_S ({self.bounds.max_ttl_s}), "
                "the process-wide ceiling",
            )
        return value

    def size(self, node: yaml.Node, field: str) -> int:
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "str":
            try:
                value = parse_bytes(str(node.value))
            except ValueError as exc:
                raise self.fail(node, field, str(exc)) from exc
        else:
            value = self.positive_int(node, field)
        if value <= 0:
            raise self.fail(node, field, "must be more than 0 bytes")
        if value > self.bounds.max_entry_bytes:
            raise self.fail(
                node,
                field,
                f"{value} exceeds INFERCACHE_MAX_PAYLOAD_BYTES ({self.bounds.max_entry_bytes})",
            )
        return value

    def fraction(self, node: yaml.Node, field: str) -> float:
        if isinstance(node, yaml.ScalarNode) and node.tag in (_TAG + "float", _TAG + "int"):
            value = float(node.value)
            if 0.0 <= value <= 1.0:
                return value
        raise self.fail(node, field, f"expected a number in [0, 1], got {_kind(node)}")

    def cache_mode(self, node: yaml.Node, field: str) -> str:
        if isinstance(node, yaml.ScalarNode) and node.value in GATEWAY_CACHE_MODES:
            return str(node.value)
        expected = ", ".join(GATEWAY_CACHE_MODES)
        raise self.fail(node, field, f"expected one of {expected}, got {_kind(node)}")

    def overrides(self, node: yaml.Node, field: str) -> dict[str, Any]:
        """The TenantPolicy fields a defaults or tenant block sets (and only those)."""
        fields: dict[str, Callable[[yaml.Node, str], Any]] = {
            "cacheable": self.boolean,
            "default_ttl_s": self.ttl,
            "max_ttl_s": self.ttl,
            "deterministic_only": self.boolean,
            "max_entry_bytes": self.size,
            "retain_inputs": self.boolean,
            "gateway_cache_mode": self.cache_mode,
            "verify_rate": self.fraction,
            "verify_budget": self.fraction,
        }
        out: dict[str, Any] = {}
        lines: dict[str, yaml.Node] = {}
        for name, key_node, value in self.mapping(node, field):
            path = f"{field}.{name}"
            if name == "bypass":
                for rule, _, flag in self.mapping(value, path):
                    if rule not in _BYPASS_FIELDS:
                        raise self.fail(flag, f"{path}.{rule}", _unknown(rule, _BYPASS_FIELDS))
                    out[_BYPASS_FIELDS[rule]] = self.boolean(flag, f"{path}.{rule}")
            elif name in fields:
                out[name] = fields[name](value, path)
                lines[name] = value
            else:
                raise self.fail(key_node, path, _unknown(name, [*fields, "bypass"]))
        default, cap = out.get("default_ttl_s"), out.get("max_ttl_s")
        if default is not None and cap is not None and default > cap:
            raise self.fail(
                lines["default_ttl_s"],
                f"{field}.default_ttl_s",
                f"{default} exceeds max_ttl_s ({cap}) of the same block",
            )
        return out


def _kind(node: yaml.Node | None) -> str:
    if isinstance(node, yaml.ScalarNode):
        tag = node.tag.removeprefix(_TAG)
        return f"{tag} {node.value!r}" if tag != "null" else "nothing (null)"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return "nothing"


def _unknown(name: str, known: Any) -> str:
    return f"unknown key {name!r}; expected one of {', '.join(sorted(known))}"


def parse_policy(text: str, source: str = "<policy>", bounds: PolicyBounds | None = None) -> Policy:
    """Parse and validate a policy document; raises PolicyError naming line and field."""
    reader = _Reader(source, bounds or PolicyBounds.from_config(Config()))
    if len(text.encode("utf-8")) > MAX_POLICY_FILE_BYTES:
        raise PolicyError(source, None, "", f"is larger than {MAX_POLICY_FILE_BYTES} bytes")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(source, line, "", f"not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise PolicyError(source, None, "", f"not valid YAML: {exc}") from exc
    if root is None:
        # An empty file is more likely a truncated write than a wish for the defaults.
        raise PolicyError(source, None, "", "is empty (write `defaults: {}` for the built-ins)")
    defaults = TenantPolicy()
    tenant_nodes: list[tuple[str, yaml.Node]] = []
    for name, key_node, value in reader.mapping(root, ""):
        if name == "version":
            if reader.positive_int(value, "version") != 1:
                raise reader.fail(value, "version", "only version 1 exists")
        elif name == "defaults":
            defaults = dataclasses.replace(defaults, **reader.overrides(value, "defaults"))
        elif name == "tenants":
            for tenant, tenant_key, block in reader.mapping(value, "tenants"):
                if not tenant.strip():
                    raise reader.fail(tenant_key, "tenants", "tenant names must not be empty")
                tenant_nodes.append((tenant, block))
        else:
            raise reader.fail(key_node, name, _unknown(name, ["version", "defaults", "tenants"]))
    # Tenants inherit the defaults block whichever order the two appear in.
    tenants = {
        tenant: dataclasses.replace(defaults, **reader.overrides(block, f"tenants.{tenant}"))
        for tenant, block in tenant_nodes
    }
    return Policy(defaults, MappingProxyType(tenants), source)


def read_policy_file(path: str, bounds: PolicyBounds | None = None) -> Policy:
    """Read and parse a policy file (blocking: call it from a worker thread on a loop)."""
    try:
        # Opened without blocking and checked before reading: a FIFO would block the
        # open (and the start) until a writer appears, a device could be read forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PolicyError(path, None, "", "is not a regular file")
            raw = f.read(MAX_POLICY_FILE_BYTES + 1)
    except OSError as exc:
        raise PolicyError(path, None, "", f"cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(path, None, "", f"is not UTF-8 ({exc.reason})") from exc
    return parse_policy(text, path, bounds)
