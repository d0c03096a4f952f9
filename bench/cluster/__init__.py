"""python -m bench.cluster: the warm tier on a Redis Cluster against one Redis, and the
failover drill (see __main__.py)."""
