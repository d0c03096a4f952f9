"""Opening the KV event publisher the settings ask for (INFERCACHE_KV_EVENTS_ENDPOINT)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from sidecar.config import ConfigError
from sidecar.config.feature_sections import KvConfig
from sidecar.events.recorder import EventRecorder, Publisher

log = structlog.get_logger("infercache.events")


@dataclass(frozen=True, slots=True)
class KvEvents:
    """The publisher and the recorder the hot tiers report to."""

    publisher: Publisher
    recorder: EventRecorder

    async def close(self) -> None:
        """Send what is queued (about a second at most), then close the sockets."""
        await asyncio.to_thread(self.publisher.close)


async def open_kv_events(kv: KvConfig) -> KvEvents | None:
    """The publisher bound/connected now (None when no endpoint is set); ConfigError when
    the `events` extra is missing or the endpoint cannot be opened."""
    if not kv.events_endpoint:
        return None
    try:
        # Imported only when enabled: pyzmq and msgspec are the optional `events` extra.
        from sidecar.events.publisher import ZmqEventPublisher
    except ImportError as exc:
        raise ConfigError(
            f"INFERCACHE_KV_EVENTS_ENDPOINT needs the events extra "
            f"(pip install 'infercache[events]'): {exc}"
        ) from exc
    publisher = ZmqEventPublisher(kv.events_endpoint, kv.events_replay_endpoint)
    try:
        await asyncio.to_thread(publisher.start)
    except Exception as exc:
        raise ConfigError(
            f"INFERCACHE_KV_EVENTS_ENDPOINT {kv.events_endpoint!r} / REPLAY_ENDPOINT "
            f"{kv.events_replay_endpoint!r}: cannot open: {exc}"
        ) from exc
    log.info(
        "kv_events_publishing",
        endpoint=kv.events_endpoint,
        replay_endpoint=kv.events_replay_endpoint or None,
    )
    recorder = EventRecorder(publisher)
    recorder.cleared()  # seq 0: what an earlier process of this sidecar published is void
    return KvEvents(publisher, recorder)
