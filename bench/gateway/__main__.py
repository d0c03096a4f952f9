"""infercache's OpenAI-compatible gateway against LiteLLM's proxy, same upstream, same load.

    .venv/bin/python -m bench.gateway            # 3 rounds of 4 s loops (~5 min)
    .venv/bin/python -m bench.gateway --smoke    # 1 round of 0.4 s loops (LiteLLM's start
                                                 # takes most of it)

Both sit in front of one model server (tests/support/model_server.py: deterministic
answers after a fixed --delay-ms, default 20), each with its cache on its own real
redis-server (bench/gateway/servers.py). One load generator (bench/gateway/load.py: raw
keep-alive HTTP/1.1, closed loop) drives each in turn, alternating the order every round:

  hit   32 hot chat requests, each asked twice first (stored), then cycled through for
        the loop at concurrency 1, 16, 64; every answer must say hit and the upstream
        must see no call, or the figure is flagged; the same loops, in the same rotation,
        against a canned answer on the gateway's stack (`canned`: bench/gateway/canned.py)
  miss  every request new, at concurrency 1 and 16, through each gateway, straight to
        the upstream (`direct`) and through a bare forwarder on the gateway's own HTTP
        stack (`bare`: bench/gateway/bare_proxy.py, no cache): overhead = p50(server) -
        p50(direct) of the same round; bare's is what the stack alone costs

Figures are medians over rounds of each loop's p50, p99 and RPS. Then the correctness
probes (bench/gateway/probes.py) against both and the SSE replay check.

  --baseline CMD   a second infercache gateway (another checkout's `infercache`, its own
                   redis-server) in the same rotation as the first: before and after a
                   change from one run; its floor keys end in _base
  --skip-litellm   no LiteLLM (its venv is not built; its keys are nan)

Summary keys (the hit ratios conservative: the worst concurrency counts):
hit_p50_vs_litellm (max over concurrencies of infercache p50 / LiteLLM p50; goal <= 0.3),
hit_rps_vs_litellm (min of the RPS ratios; goal >= 3), miss_overhead_ms (at concurrency
1: the latency a lone request gains; goal <= 1) and miss_overhead_c16_ms (at 16, not a
goal: on a 2-core machine the load generator, the upstream and the gateway share the
CPU, so at 16 the figure is the gateway's CPU per miss queued, see gateway_miss_cpu_ms),
bare_proxy_miss_overhead_ms (the same for the bare forwarder: the floor),
hit_rps_vs_canned, miss_overhead_vs_bare_ms and miss_overhead_vs_bare_c16_ms (the
gateway against its floors, bench/gateway/floors.py),
sse_replay_exact, cross_tenant_hits (the tenant probe's merged answers), merged_probes
(all probes), each also as litellm_*; goals_met; responses_hit_p50_ms,
responses_miss_overhead_ms and the other responses_* figures (bench/gateway/responses.py:
POST /v1/responses, which LiteLLM does not cache); and the Messages API's
messages_hit_p50_ms, messages_miss_overhead_ms and the rest (bench/gateway/messages.py).
A side that could not run (LiteLLM's venv not buildable, a checkout without the gateway)
prints why and reports nan.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.gateway import floors, messages, servers
from bench.gateway.figures import Plan, Side, print_correctness, report
from bench.gateway.load import Target, closed_loop, cycling, distinct, one, verdict
from bench.gateway.probes import chat_body, run_probes, sse_replay, upstream_streams
from bench.gateway.responses import measure_responses
from bench.harness.procs import redis_server
from bench.harness.report import print_summary

HOT = 32


def _gateway_side(name: str, pid: int, port: int) -> Side:
    """An infercache gateway: its two tenants' targets."""
    path, keys = "/v1/chat/completions", servers.KEYS
    return Side(
        name,
        pid,
        Target(port, path, (("Authorization", f"Bearer {keys['acme']}"),)),
        Target(port, path, (("Authorization", f"Bearer {keys['globex']}"),)),
    )


def _hot_bodies(side: str) -> list[bytes]:
    return [chat_body(f"hot question {i} for {side}") for i in range(HOT)]


async def _warm(side: Side) -> None:
    """Ask each hot request until every one of them is a hit (LiteLLM writes its Redis
    cache in batches: a second ask right after the first can still miss)."""
    for _ in range(40):
        answers = [await one(side.first, body) for body in _hot_bodies(side.name)]
        if all(verdict(a.headers) == "hit" for a in answers):
            return
        await asyncio.sleep(0.5)
    side.flags.append("warm-up: the hot requests never all hit")


async def _hit_loop(side: Side, c: int, seconds: float, upstream_port: int) -> None:
    before = servers.upstream_calls(upstream_port)
    cpu = servers.tree_cpu_seconds(side.pid)
    result = await closed_loop(side.first, cycling(side.first, _hot_bodies(side.name)), c, seconds)
    cpu = servers.tree_cpu_seconds(side.pid) - cpu
    called = servers.upstream_calls(upstream_port) - before
    checked = not side.floor and (set(result.verdicts) != {"hit"} or called)
    if checked or set(result.statuses) != {200}:
        side.flags.append(f"hit c={c}: {dict(result.verdicts)} {dict(result.statuses)} {called=}")
    side.add("hit", c, result, cpu)


async def _miss_loop(side: Side, c: int, seconds: float) -> None:
    nonce = uuid.uuid4().hex[:12]
    bodies = distinct(side.first, lambda i: chat_body(f"new question {nonce} {i}"))
    cpu = servers.tree_cpu_seconds(side.pid)
    result = await closed_loop(side.first, bodies, c, seconds)
    cpu = servers.tree_cpu_seconds(side.pid) - cpu
    if set(result.statuses) != {200} or result.verdicts.get("hit"):
        side.flags.append(f"miss c={c}: {dict(result.verdicts)} {dict(result.statuses)}")
    side.add("miss", c, result, cpu)


async def measure(
    sides: list[Side], baselines: list[Side], canned: Side, plan: Plan, upstream_port: int
) -> None:
    """Every loop of every side, `plan.rounds` times, the side order reversed each round;
    the miss loops of the `baselines` (direct first) too, and the `canned` floor's hit
    loops in the hit rotation."""
    for side in sides:
        await _warm(side)
    for side in [*baselines, canned, *sides]:
        cpu = servers.tree_cpu_seconds(side.pid)
        await asyncio.sleep(plan.seconds)
        side.idle_cpu_per_s = (servers.tree_cpu_seconds(side.pid) - cpu) / plan.seconds
    for r in range(plan.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        hitters = [canned, *sides] if r % 2 == 0 else [*sides[::-1], canned]  # gw beside it
        for c in plan.hit_concurrency:
            for side in hitters:
                await _hit_loop(side, c, plan.seconds, upstream_port)
        for c in plan.miss_concurrency:
            for side in [*baselines, *order]:
                await _miss_loop(side, c, plan.seconds)


async def run(plan: Plan) -> int:
    """Start everything, measure, probe, report."""
    print(f"# load average at start: {os.getloadavg()[0]:.2f}; upstream delay {plan.delay_ms} ms")
    with (
        tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        up = servers.upstream(plan.delay_ms, plan.model_server)
        rs = servers.redises(work)
        bp = servers.bare_proxy(up.port)
        procs = [up, rs.litellm, rs.gateway, bp]
        if plan.baseline is not None:
            (work / "base").mkdir()
            base_redis = redis_server(str(work / "base"), "redis-gateway-base")
            procs.append(base_redis)
        for p in procs:
            stack.callback(p.stop)
            p.start()
        gw: Side | None = None
        ll: Side | None = None
        if servers.gateway_supported(plan.infercache):
            g = servers.gateway(plan.infercache, work, up.port, rs.gateway.port)
            stack.callback(g.stop)
            g.start(timeout_s=120)
            gw = _gateway_side("infercache", g.pid, g.port)
        else:
            print(f"# infercache gateway skipped: {plan.infercache} serve has no --gateway-listen")
        base: Side | None = None
        if plan.baseline is not None:
            b = servers.gateway(plan.baseline, work / "base", up.port, base_redis.port)
            stack.callback(b.stop)
            b.start(timeout_s=120)
            base = _gateway_side("infercache-base", b.pid, b.port)
        venv, why = servers.litellm_venv() if plan.litellm else (None, "--skip-litellm")
        if venv is not None:
            lp = servers.litellm(venv, work, up.port, rs.litellm.port)
            stack.callback(lp.stop)
            lp.start(timeout_s=240)
            auth = (("Authorization", f"Bearer {servers.LITELLM_MASTER_KEY}"),)
            ll = Side(
                "litellm",
                lp.pid,
                Target(lp.port, "/v1/chat/completions", auth),
                Target(lp.port, "/v1/chat/completions", auth),
            )
        else:
            print(f"# litellm skipped: {why}")
        direct = Side(
            "direct", up.pid, Target(up.port, "/v1/chat/completions"), Target(up.port, "/")
        )
        bare = Side("bare", bp.pid, Target(bp.port, "/v1/chat/completions"), Target(bp.port, "/"))
        cp = await floors.canned_server(work, direct.first)
        stack.callback(cp.stop)
        cp.start()
        at = Target(cp.port, "/v1/chat/completions")
        canned = Side("canned", cp.pid, at, at, floor=True)
        sides = [s for s in (gw, base, ll) if s is not None]
        await measure(sides, [direct, bare], canned, plan, up.port)
        responses: dict[str, Any] = {}
        if gw is not None:  # bench/gateway/responses.py: /v1/responses, the same run
            m1 = plan.miss_concurrency[0]
            responses = await measure_responses(
                gw.first.port, bp.port, up.port, plan.rounds, plan.seconds, plan.hit_concurrency, m1
            )
        on_messages = await messages.measure(
            gw.first.port if gw else None,
            up.port,
            bp.port,
            plan.rounds,
            plan.seconds,
            plan.hit_concurrency,
            up.port,
        )
        streams = await upstream_streams(direct.first)
        for s in [x for x in (gw, ll) if x is not None]:
            s.probes = await run_probes(s.first, s.second)
            if streams:
                s.sse = await sse_replay(s.first)
        if not streams:
            print("# sse replay untested: the model server does not stream")
        print_correctness([x for x in (gw, ll) if x is not None])
        pairs = report(gw, ll, direct, bare, canned, plan, base) | responses | on_messages
    idle = ", ".join(
        f"{s.name} {s.idle_cpu_per_s * 1000:.1f}" for s in [direct, bare, canned, *sides]
    )
    print(f"# idle CPU ms/s (taken off the cpu column): {idle}")
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    print_summary(pairs)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: --smoke, --rounds, --seconds, --delay-ms."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="1 round of 0.4 s loops")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one loop")
    parser.add_argument("--delay-ms", type=int, default=20, help="the upstream's latency")
    parser.add_argument(
        "--infercache",
        type=Path,
        default=servers.INFERCACHE,
        help="the `infercache` command to run (default: this checkout's .venv)",
    )
    parser.add_argument(
        "--model-server",
        type=Path,
        default=servers.MODEL_SERVER,
        help="the model server script (default: this checkout's tests/support/model_server.py)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another `infercache` command whose gateway runs beside this one, in the same"
        " rotation (its floor figures get a _base suffix)",
    )
    parser.add_argument(
        "--skip-litellm", action="store_true", help="leave LiteLLM out (its keys report nan)"
    )
    args = parser.parse_args(argv)
    tools = (
        args.delay_ms,
        args.infercache,
        args.model_server,
        args.baseline,
        not args.skip_litellm,
    )
    if args.smoke:
        plan = Plan(1, 0.4, (1, 16, 64), (1, 16), *tools)
    else:
        plan = Plan(args.rounds, args.seconds, (1, 16, 64), (1, 16), *tools)
    return asyncio.run(run(plan))


if __name__ == "__main__":
    raise SystemExit(main())
