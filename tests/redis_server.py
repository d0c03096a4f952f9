"""Moved to tests.support.processes; kept until every importer has moved."""

from tests.support.processes import RedisServer, free_port

__all__ = ["RedisServer", "free_port"]
