"""Lookup benchmark: the sidecar's hit paths against a bare grpc.aio echo server.

Everything runs in one process tree started (and stopped, also on Ctrl-C or errors)
by `python -m bench.lookup`:

- servers, each its own process, so client and server never share an event loop or GIL:
  a bare grpc.aio echo server (the sidecar's CacheService with its request and response
  types, answering canned 1 KiB HITs; same server options and uvloop as the sidecar),
  the real sidecar with its hot tier (`python -m sidecar serve`), a sidecar whose
  every hit goes to Redis (`--redis-url`, `--hot-max-entries 0`) and a redis-server on
  a free port;
- client processes (one by default, `--client-procs`), each running N concurrent asyncio
  tasks over one gRPC channel (AsyncCacheClient's channel options; requests built once
  up front) or one redis.asyncio pool, with the same driver loop for every scenario,
  checking every answer (a HIT from the expected tier with the 1 KiB payload).

Scenarios: echo, hot, warm (Lookup); echo-batch32, batch32-hot, batch32-warm
(LookupBatch of 32 keys); redis-get (redis.asyncio GET of the warm sidecar's own
~1.3 KiB entries). Cells (scenario x concurrency) run back to back within a round, so a
sidecar cell and its baseline see the same machine; `--rounds` passes are made (odd
ones in reverse order) and each cell shows its best round: neighbours on a shared
machine only ever slow a cell down. The per-round ratios are printed too.

Columns: RPC/s (keys/s for batches), p50/p99 latency, the server process's CPU (share
of one core, microseconds per RPC, kernel share, read/write syscalls per RPC, from
/proc), the client's CPU, the ratio to the baseline, degraded MISSes (not counted
as RPCs) and failed calls. The last line holds `key=value` pairs; the ratios there are
sidecar RPC/s / baseline RPC/s at concurrency 16 (`ratio_concurrency=16`), and the
*_cpu_vs_* ones baseline server µs/RPC / sidecar server µs/RPC (steadier on a busy box).

    .venv/bin/python -m bench.lookup --quick     # one short round, about 40 s
    .venv/bin/python -m bench.lookup             # 3 rounds of 3 s cells, about 4 min
    .venv/bin/python -m bench.lookup --smoke     # concurrency 16, 0.3 s cells, seconds

`--py-spy DIR` samples each server with py-spy (if installed in the venv: `pip install
py-spy`) during each cell into DIR/<scenario>-c<N>-r<round>.txt (collapsed stacks);
`--cprofile DIR` runs the servers under cProfile (DIR/<server>.prof, written at exit).
Telemetry on vs off is its own benchmark: `python -m bench.telemetry`.

scenarios.py names the cells, servers.py the echo baseline, driver.py the client
workers' loop, report.py the table and the summary line.
"""
