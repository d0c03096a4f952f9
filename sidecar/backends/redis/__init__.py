"""The Redis backend, the only package that imports redis.

Warm tier, control store, KV warm store and hit store on one shared client.
"""
