"""LogThrottle: one line per key per interval, each with the occurrences it stands for."""

from __future__ import annotations

from sidecar.observability.throttle import LogThrottle


def test_first_occurrence_then_one_line_per_interval_with_the_count() -> None:
    """The first hit logs (count 1); hits within the interval are counted silently; the
    first hit after it logs with every occurrence since the last line."""
    now = [0.0]
    throttle = LogThrottle(interval_s=60.0, clock=lambda: now[0])
    assert throttle.hit("a") == 1
    assert [throttle.hit("a") for _ in range(5)] == [None] * 5
    assert throttle.hit("b") == 1  # keys are independent
    now[0] = 61.0
    assert throttle.hit("a") == 6
    assert throttle.hit("a") is None


def test_the_oldest_key_is_forgotten_beyond_the_cap() -> None:
    """At most max_keys keys are tracked: a new key past the cap evicts the oldest."""
    throttle = LogThrottle(interval_s=60.0, clock=lambda: 0.0, max_keys=2)
    assert throttle.hit("a") == 1
    assert throttle.hit("b") == 1
    assert throttle.hit("c") == 1  # "a" forgotten
    assert throttle.hit("a") == 1
    assert throttle.hit("c") is None
