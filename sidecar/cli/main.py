"""The `infercache` command: serve, and the operator subcommands."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from infercache_client.fingerprint import FingerprintError

from sidecar import __version__
from sidecar.cli import admin as admin_cli
from sidecar.cli import fingerprint as fingerprint_cli
from sidecar.cli import prewarm as prewarm_cli
from sidecar.cli import verification as verification_cli
from sidecar.config import SETTINGS, ConfigError, load_config, unknown_variables
from sidecar.policy.file import PolicyError


def _add_serve(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the sidecar",
        description="Run the sidecar. Every flag can also be set as an INFERCACHE_* variable.",
    )
    for s in SETTINGS:
        if s.is_switch:
            # `--uvloop` / `--no-uvloop`; an explicit value (`--uvloop false`, as the
            # variable takes it) is still accepted for scripts written that way.
            p.add_argument(
                s.flag,
                dest=s.name,
                nargs="?",
                const="true",
                default=None,
                metavar="true|false",
                help=f"{s.help} (--no-{s.flag[2:]} to turn off; env {s.env}, default {s.default})",
            )
            p.add_argument(
                f"--no-{s.flag[2:]}",
                dest=s.name,
                action="store_const",
                const="false",
                help=argparse.SUPPRESS,
            )
            continue
        p.add_argument(
            s.flag,
            dest=s.name,
            default=None,
            metavar="VALUE",
            help=f"{s.help} (env {s.env}, default {s.default!r})",
        )
    p.add_argument(
        "--adapter",
        dest="adapter_list",
        action="append",
        default=None,
        metavar="NAME=DIR",
        help="a LoRA adapter to fingerprint at start (repeatable; adds to --adapters)",
    )
    p.set_defaults(func=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    overrides = {
        s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name) is not None
    }
    if args.adapter_list:
        (adapters,) = (s for s in SETTINGS if s.name == "adapters")
        given = [overrides.get("adapters") or os.environ.get(adapters.env, "")]
        overrides["adapters"] = ",".join(x for x in given + args.adapter_list if x)
    try:
        config = load_config(os.environ, overrides)
    except ConfigError as exc:
        print(f"infercache: configuration error: {exc}", file=sys.stderr)
        return 2
    import structlog

    from sidecar.host import serve
    from sidecar.observability.logs import configure_logging

    configure_logging(
        config.telemetry.log_level,
        config.telemetry.log_format,
        repeat_interval_s=config.telemetry.log_repeat_interval_s,
    )
    for warning in unknown_variables(os.environ):
        structlog.get_logger("infercache.config").warning("unknown_variable", detail=warning)
    try:
        if config.server.uvloop:
            import uvloop

            return uvloop.run(serve(config))
        return asyncio.run(serve(config))
    except FingerprintError as exc:
        print(f"infercache: cannot fingerprint the model: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"infercache: configuration error: {exc}", file=sys.stderr)
        return 2
    except PolicyError as exc:
        print(f"infercache: INFERCACHE_POLICY_FILE: invalid policy file: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"infercache: {exc}", file=sys.stderr)
        return 1


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: `--hot-max-byte` is refused, not taken for --hot-max-bytes
    (and subcommands' parsers are built as the same class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = _Parser(prog="infercache", description=__doc__)
    parser.add_argument("--version", action="version", version=f"infercache {__version__}")
    sub: argparse._SubParsersAction[argparse.ArgumentParser]
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_serve(sub)
    admin_cli.add_parsers(sub)
    verification_cli.add_parser(sub)
    prewarm_cli.add_parser(sub)
    fingerprint_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
