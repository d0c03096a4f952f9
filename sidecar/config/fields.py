"""The `setting()` field helper and the walk that turns sections into Settings.

A setting is declared once, as a field of a section dataclass:

    pool_bytes: int = setting(2**30, "KV pool size", parse=parse_bytes)

Its name (the section's PREFIX plus the field name, unless `name=` says otherwise)
gives the environment variable INFERCACHE_<NAME>, the flag --<name> and the row of
the README table; nothing else declares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sidecar.config.parsers import format_bytes, parse_bool, parse_bytes

ENV_PREFIX = "INFERCACHE_"
_META = "infercache.setting"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Declared:
    """What setting() records in the field's metadata."""

    parse: Callable[[str], Any]
    help: str
    name: str | None
    show: Callable[[Any], str]


def _show(value: object) -> str:
    """A default as the text its parser reads back ('' for nothing)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def setting(
    default: T,
    help: str,
    parse: Callable[[str], T] | None = None,
    *,
    name: str | None = None,
    secret: bool = False,
) -> T:
    """Declare a section field as a setting: its default, one-line help and parser.

    `parse` may be left out for str (taken as is) and bool (true/false) defaults.
    `name`: the flat setting name when it is not the section's PREFIX plus the field.
    `secret`: keep the value out of the section's repr (a logged Config shows no token).
    """
    parser: Callable[[str], Any]
    if parse is not None:
        parser = parse
    elif isinstance(default, bool):
        parser = parse_bool
    elif isinstance(default, str):
        parser = str
    else:
        raise TypeError(f"setting({default!r}): give a parser")
    show = format_bytes if parser is parse_bytes else _show
    meta = {_META: _Declared(parser, help, name, show)}
    if isinstance(default, dict):
        # A fresh mapping per instance (dataclasses refuse a shared mutable default).
        return dataclasses.field(  # type: ignore[return-value]
            default_factory=default.copy, metadata=meta, repr=not secret
        )
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


@dataclass(frozen=True, slots=True)
class Setting:
    """One configurable value, as generated from its declaration."""

    name: str
    """The flat name: the key of load_config's overrides, and of the flag and variable."""
    section: str
    """The Config field holding its section ("kv")."""
    field: str
    """Its field in that section ("pool_bytes")."""
    parse: Callable[[str], Any]
    default: str
    """The default as text (what the parser reads back; '' for nothing)."""
    help: str

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        """The CLI flag that sets it."""
        return "--" + self.name.replace("_", "-")

    @property
    def is_switch(self) -> bool:
        """A boolean setting: `--flag` / `--no-flag` on the command line."""
        return self.parse is parse_bool


def section_settings(section_name: str, section: type[Any]) -> Iterator[Setting]:
    """The settings declared by one section class, in field order."""
    prefix: str = getattr(section, "PREFIX", "")
    for f in dataclasses.fields(section):
        declared = f.metadata.get(_META)
        if not isinstance(declared, _Declared):
            raise TypeError(f"{section.__name__}.{f.name} is not declared with setting()")
        default = f.default_factory() if callable(f.default_factory) else f.default
        yield Setting(
            name=declared.name or prefix + f.name,
            section=section_name,
            field=f.name,
            parse=declared.parse,
            default=declared.show(default),
            help=declared.help,
        )
