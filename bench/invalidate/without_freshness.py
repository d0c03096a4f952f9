"""`infercache serve` with the invalidation check taken out (benchmarks only).

`python -m bench.invalidate` runs this next to a normal sidecar to measure what the
check costs a hot hit. It composes the same server as `infercache serve` (the same
flags, config, policy, telemetry and serve_app), but hands build_app a rule set whose
`is_dead` always says False: no entry is ever dead, so every lookup, store and reclaim
skips the rule check. What remains is one call to a trivial method where the real check
was. `Freshness.confirmed()` is unchanged (with the embedded store it is always true; it
costs one clock read in both variants). Never run this in front of real traffic: it
serves invalidated results.

    .venv/bin/python -m bench.invalidate.without_freshness --listen 127.0.0.1:50061 ...
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from sidecar.app import build_app, identify_pod, policy_watcher
from sidecar.cli.main import build_parser
from sidecar.config import SETTINGS, Config, load_config
from sidecar.host import serve_app
from sidecar.invalidation.rules import Dims, RuleSet
from sidecar.observability.logs import configure_logging
from sidecar.observability.telemetry import configure_telemetry


class NeverDead(RuleSet):
    """A RuleSet that keeps rules (for the admin plane) but never declares an entry dead."""

    def is_dead(self, dims: Dims, entry_epoch: int) -> bool:
        """Always False: the check is compiled out, as far as Python allows."""
        return False


def config_from(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> Config:
    """The Config `infercache serve ARGV` would run with (flags over INFERCACHE_*)."""
    args = build_parser().parse_args(["serve", *argv])
    given = {s.name: getattr(args, s.name) for s in SETTINGS}
    return load_config(environ, {k: v for k, v in given.items() if v is not None})


async def serve(config: Config) -> None:
    """Build the app with NeverDead rules, serve it until SIGTERM/SIGINT, then stop."""
    policy = policy_watcher(config)
    await policy.load_initial()
    pod = await identify_pod(config)
    setup = configure_telemetry(
        config.otel_env,
        metrics_listen=config.telemetry.metrics_listen,
        tenants_in_clear=config.telemetry.tenants_in_clear,
    )
    try:
        app = await build_app(config, pod, setup.telemetry, policy, rules=NeverDead())
        running = await serve_app(app, setup)
    except BaseException:
        setup.shutdown()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await running.stop(config.server.grace_period_s)


def main(argv: Sequence[str]) -> int:
    """Serve with the flags of `infercache serve`."""
    config = config_from(argv)
    configure_logging(config.telemetry.log_level, config.telemetry.log_format)
    if config.server.uvloop:
        import uvloop

        uvloop.run(serve(config))
    else:
        asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
