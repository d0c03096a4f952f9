"""Prewarm: replay representative or previously hot requests against the pod's model server."""
