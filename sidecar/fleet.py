"""The fleet's secrets, from the configuration: the MAC keys that authenticate what a
shared store holds (sidecar.macs) and the lease signer's key."""

from __future__ import annotations

import asyncio
import os

import structlog

from sidecar.config import Config, ConfigError
from sidecar.errors import TierUnavailable
from sidecar.invalidation.store import ControlStore
from sidecar.macs import FleetKeys, read_secret_file
from sidecar.results.lease_tokens import LeaseSigner

log = structlog.get_logger("infercache.app")


def fleet_keys(config: Config) -> FleetKeys:
    """The fleet's MAC keys: from INFERCACHE_FLEET_SECRET_FILE (and the previous secret
    while rotating), else a fixed public key on the development switch, else (the
    embedded store: nothing is shared) a random key of this process. ConfigError when
    a file cannot be read or holds too short a secret."""
    f = config.fleet
    if f.secret_file:
        secrets = []
        for name, path in (
            ("INFERCACHE_FLEET_SECRET_FILE", f.secret_file),
            ("INFERCACHE_FLEET_PREVIOUS_SECRET_FILE", f.previous_secret_file),
        ):
            if path:
                try:
                    secrets.append(read_secret_file(path))
                except ValueError as exc:
                    raise ConfigError(f"{name}: {exc}") from exc
        return FleetKeys(secrets)
    if f.insecure_dev_no_secret:
        log.warning(
            "insecure_dev_no_fleet_secret",
            detail="INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET: values in Redis are signed with a "
            "public key; anyone who can write to Redis can forge hits",
        )
        return FleetKeys.insecure_dev()
    return FleetKeys.ephemeral()


async def lease_signer(config: Config, control: ControlStore, keys: FleetKeys) -> LeaseSigner:
    """The configured secret, else one derived from the fleet secret, else the
    deployment's shared one, else (store down) a local one."""
    if config.lease.secret:
        return LeaseSigner(config.lease.secret.encode())
    if config.fleet.secret_file or not control.shared:
        # Never the copy in the store: whoever can read Redis could forge leases with it.
        return LeaseSigner(keys.derived("lease"))
    for attempt in range(5):
        try:
            return LeaseSigner(await control.shared_secret(os.urandom(32)))
        except TierUnavailable as exc:
            log.warning("lease_secret_unavailable", attempt=attempt, error=str(exc))
            await asyncio.sleep(0.3)
    log.warning(
        "lease_secret_local",
        detail="store unreachable at start: leases verify only on this sidecar until restart; "
        "set INFERCACHE_LEASE_SECRET to avoid this",
    )
    return LeaseSigner(os.urandom(32))


async def readopt_secret(signer: LeaseSigner, control: ControlStore) -> None:
    """After the store lost its data (and the shared secret with it): offer ours again
    and sign with whichever the store now holds, so every sidecar agrees once more."""
    signer.rekey(await control.shared_secret(signer.secret))
