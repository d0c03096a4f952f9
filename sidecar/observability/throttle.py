"""One log line per distinct event per interval, with how many times it happened."""

from __future__ import annotations

import time
from collections.abc import Callable


class LogThrottle:
    """Counts occurrences of each key; lets the first through, then one per interval.

    `hit(key)` answers how many occurrences the line about to be logged stands for
    (the first: 1; later: every occurrence since the last line), or None to stay quiet.
    At most `max_keys` keys are tracked; beyond that, the oldest is forgotten.
    """

    def __init__(
        self,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._max_keys = max_keys
        self._seen: dict[str, tuple[float, int]] = {}  # key -> (last line's time, count since)

    def hit(self, key: str) -> int | None:
        """Count one occurrence; the count to log now, or None (see the class doc)."""
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self._interval_s:
            self._seen[key] = (last[0], last[1] + 1)
            return None
        if last is None and len(self._seen) >= self._max_keys:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = (now, 0)
        return 1 if last is None else last[1] + 1
