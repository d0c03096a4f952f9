"""Invalidation: epoch-stamped rules, leases, fleet freshness, background reclaim."""
