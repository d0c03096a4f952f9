"""A real Redis Cluster for tests and benches: 3 masters + 3 replicas on free ports.

Each node is a `redis-server --cluster-enabled yes` with its own data directory and
cluster config file; `redis-cli --cluster create ... --cluster-replicas 1` joins them.
A small node timeout makes failovers take about two seconds instead of fifteen.
Standard library only (bench/ imports it too).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port, redis_command, stop_process

NODE_TIMEOUT_MS = 1000
_BUS_OFFSET = 10000  # Redis Cluster's bus listens on port + 10000


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too and below 65536."""
    for _ in range(1000):
        port = free_port()
        if port + _BUS_OFFSET > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + _BUS_OFFSET))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def redis_cli(port: int, *args: str, timeout_s: float = 10.0) -> str:
    """Run redis-cli against 127.0.0.1:port and return its output (raises on failure)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli not found; scripts/ensure_redis.sh installs it")
    done = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    return done.stdout


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One line of CLUSTER NODES."""

    node_id: str
    port: int
    master: bool
    failed: bool
    slots: tuple[tuple[int, int], ...]


def parse_nodes(text: str) -> list[NodeInfo]:
    """CLUSTER NODES output as NodeInfo values (slot ranges of masters)."""
    out: list[NodeInfo] = []
    for line in text.strip().splitlines():
        fields = line.split()
        flags = fields[2].split(",")
        port = int(fields[1].split("@", 1)[0].rsplit(":", 1)[1])
        ranges: list[tuple[int, int]] = []
        for spec in fields[8:]:
            if spec.startswith("["):  # a slot being migrated: not owned yet
                continue
            lo, _, hi = spec.partition("-")
            ranges.append((int(lo), int(hi or lo)))
        out.append(NodeInfo(fields[0], port, "master" in flags, "fail" in flags, tuple(ranges)))
    return out


class RedisClusterProcesses:
    """Spawns, kills, restarts and reshards a 3 + 3 Redis Cluster bound to 127.0.0.1."""

    def __init__(self, masters: int = 3, replicas_per_master: int = 1) -> None:
        taken: set[int] = set()
        self.ports: list[int] = []
        while len(self.ports) < masters * (1 + replicas_per_master):
            port = cluster_port()
            if not {port, port + _BUS_OFFSET} & taken:
                taken |= {port, port + _BUS_OFFSET}
                self.ports.append(port)
        self.replicas_per_master = replicas_per_master
        self._dir = tempfile.TemporaryDirectory(prefix="ic-cluster-")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The sidecar's INFERCACHE_REDIS_URL for this cluster (every node a seed)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _spawn(self, port: int) -> None:
        data = Path(self._dir.name) / str(port)
        data.mkdir(exist_ok=True)
        argv = redis_command(port, data)
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        argv += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        # Slots of a failed master answer CLUSTERDOWN until its replica takes over, but
        # the other masters keep serving their own slots (deploy.md recommends it).
        argv += ["--cluster-require-full-coverage", "no"]
        self.procs[port] = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def start(self, timeout_s: float = 30.0) -> None:
        """Start every node, create the cluster, wait until every node says cluster_state:ok
        and every replica is in sync (nothing is left running when this fails)."""
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> None:
        for port in self.ports:
            self._spawn(port)
        deadline = time.monotonic() + timeout_s
        for port in self.ports:
            self._wait(lambda p=port: redis_cli(p, "PING").strip() == "PONG", deadline)
        redis_cli(
            self.ports[0],
            "--cluster",
            "create",
            *(f"127.0.0.1:{p}" for p in self.ports),
            "--cluster-replicas",
            str(self.replicas_per_master),
            "--cluster-yes",
            timeout_s=timeout_s,
        )
        self.wait_healthy(deadline - time.monotonic())

    def _wait(self, ready: object, deadline: float) -> None:
        assert callable(ready)
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError("redis cluster did not get ready in time")

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Until every running node reports cluster_state:ok, all slots covered by live
        masters, and each master has its replicas again, in sync (a replica that never
        synced cannot take over)."""
        deadline = time.monotonic() + max(timeout_s, 1.0)

        def healthy() -> bool:
            for port in self.procs:
                info = redis_cli(port, "CLUSTER", "INFO")
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
            nodes = [n for n in self.nodes() if n.port in self.procs and not n.failed]
            masters = [n for n in nodes if n.master and n.slots]
            for n in nodes:
                if not n.master and "master_link_status:up" not in redis_cli(
                    n.port, "INFO", "replication"
                ):
                    return False
            return len(masters) * (1 + self.replicas_per_master) == len(self.procs) and all(
                len(redis_cli(m.port, "CLUSTER", "REPLICAS", m.node_id).strip().splitlines())
                >= self.replicas_per_master
                for m in masters
            )

        self._wait(healthy, deadline)

    def nodes(self) -> list[NodeInfo]:
        """CLUSTER NODES as seen by a running node."""
        for port in self.procs:
            try:
                return parse_nodes(redis_cli(port, "CLUSTER", "NODES"))
            except (subprocess.SubprocessError, OSError):
                continue
        raise RuntimeError("no cluster node answers")

    def masters(self) -> list[NodeInfo]:
        """Live masters that own slots."""
        return [n for n in self.nodes() if n.master and n.slots and not n.failed]

    def slot_of(self, key: str) -> int:
        """CLUSTER KEYSLOT."""
        return int(redis_cli(next(iter(self.procs)), "CLUSTER", "KEYSLOT", key))

    def master_of_key(self, key: str) -> NodeInfo:
        """The live master owning `key`'s slot."""
        slot = self.slot_of(key)
        for n in self.masters():
            if any(lo <= slot <= hi for lo, hi in n.slots):
                return n
        raise RuntimeError(f"no live master owns slot {slot}")

    def kill(self, port: int) -> None:
        """SIGKILL one node: the way a crashed Redis pod disappears."""
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def restart(self, port: int) -> None:
        """Start a killed node again on its port; it rejoins (as a replica if it was
        replaced) from its cluster config file, with no data of its own."""
        self._spawn(port)

    def heal(self, timeout_s: float = 60.0) -> None:
        """Restart every killed node and wait until the cluster is whole again."""
        for port in self.ports:
            if port not in self.procs:
                self.restart(port)
        self.wait_healthy(timeout_s)

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for n in self.masters():
            redis_cli(n.port, "FLUSHALL")

    def reshard(self, source: NodeInfo, target: NodeInfo, slots: int) -> str:
        """Move `slots` slots with their keys from source to target (redis-cli MIGRATE:
        clients see ASK during the move and MOVED after it)."""
        return redis_cli(
            source.port,
            "--cluster",
            "reshard",
            f"127.0.0.1:{source.port}",
            "--cluster-from",
            source.node_id,
            "--cluster-to",
            target.node_id,
            "--cluster-slots",
            str(slots),
            "--cluster-yes",
            "--cluster-pipeline",
            "10",
            timeout_s=120.0,
        )

    def stop(self) -> None:
        """Kill every node and remove the data directories."""
        for proc in self.procs.values():
            stop_process(proc, timeout_s=2.0)
        self.procs.clear()
        self._dir.cleanup()


def migrate_slot(cluster: RedisClusterProcesses, slot: int, target: NodeInfo) -> int:
    """Move one slot and its keys to `target` the way redis-cli does (IMPORTING/MIGRATING,
    MIGRATE key batches, SETSLOT NODE): clients see ASK and TRYAGAIN while it runs and
    MOVED after. Returns how many keys moved."""
    source = next(n for n in cluster.masters() if any(lo <= slot <= hi for lo, hi in n.slots))
    if source.node_id == target.node_id:
        return 0
    redis_cli(target.port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source.node_id)
    redis_cli(source.port, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target.node_id)
    moved = 0
    while True:
        keys = redis_cli(source.port, "CLUSTER", "GETKEYSINSLOT", str(slot), "10").split()
        if not keys:
            break
        redis_cli(
            source.port, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys
        )
        moved += len(keys)
    others = [n for n in cluster.masters() if n.node_id not in (source.node_id, target.node_id)]
    for n in (target, source, *others):  # the order redis-cli uses
        redis_cli(n.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target.node_id)
    return moved
