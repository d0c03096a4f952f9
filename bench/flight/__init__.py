"""python -m bench.flight: single flight through the gateway while its Redis pauses.

The gateway (`python -m sidecar serve --gateway-listen`, INFERCACHE_GATEWAY_WAIT_MS
5000, the 50 ms lookup deadline) on its own redis-server, in front of the tests'
model server (every answer takes COMPUTE_MS). Workers send flights (K identical
requests of a fresh prompt at once: one upstream call is the goal) and distinct
requests (a fresh prompt each), first with Redis calm (the baseline), then while the
bench SIGSTOPs its redis-server for 300 ms every 3 s (SIGCONT after). A sampler lists
the holder keys in Redis every 50 ms.

Figures per phase: the longest any request waited beyond its own computation (its
latency less COMPUTE_MS), holds that nobody computed for more than 1 s (a holder key
seen while no request for its key was in flight: `orphaned_holds`), and upstream calls
per flight.
"""
