"""Saves the scheduler planned whose commit may still be on its way.

The worker commits a save on a background thread after the step's copy (saves.py), so
a request for the same prefix can arrive, and be looked up, before the blocks are
committed: the lookup then finds fewer blocks than are about to be there. The scheduler
remembers the blocks of each planned save for SETTLE_S; a probe that answers short of
such a block looks again (probes.py), within the request's own lookup deadline, so
back-to-back requests reuse the prefix as they did when commits were synchronous, and
a commit that failed costs that request at most its lookup deadline.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

SETTLE_S = 2.0
"""How long a planned save counts as in flight (its commit's deadline is rpc_timeout_s)."""
MAX_BLOCKS = 1 << 16
"""Most blocks remembered (the oldest are forgotten first)."""


class InFlightSaves:
    """Block hashes of the saves planned in the last SETTLE_S (engine thread only)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: dict[bytes, float] = {}
        self._order: deque[tuple[float, bytes]] = deque()

    def planned(self, hashes: Sequence[bytes]) -> None:
        """A save of these blocks was handed to the worker."""
        now = self._clock()
        self._expire(now)
        for h in hashes:
            self._since[h] = now
            self._order.append((now, h))
        while len(self._order) > MAX_BLOCKS:
            self._forget(*self._order.popleft())

    def extent(self, hashes: Sequence[bytes], usable: int) -> int:
        """How many of the first `usable` blocks a lookup could find once the saves in
        flight commit: 1 + the last one in flight (0: none is)."""
        if not self._since:
            return 0
        self._expire(self._clock())
        since = self._since
        for i in range(min(usable, len(hashes)) - 1, -1, -1):
            if hashes[i] in since:
                return i + 1
        return 0

    def found(self, hashes: Sequence[bytes], matched: int) -> None:
        """A lookup found the first `matched` blocks: their saves have landed."""
        if self._since:
            for h in hashes[:matched]:
                self._since.pop(h, None)

    def _expire(self, now: float) -> None:
        order = self._order
        while order and now - order[0][0] > SETTLE_S:
            self._forget(*order.popleft())

    def _forget(self, at: float, h: bytes) -> None:
        if self._since.get(h) == at:
            del self._since[h]
