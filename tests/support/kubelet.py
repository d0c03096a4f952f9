"""What a container of a rendered pod may open, as the kubelet would mount it.

A pure model of the parts of the kubelet and the kernel that decide whether a process
reads a mounted file, for tests of rendered manifests (no cluster):

- Secret, ConfigMap, downwardAPI and projected volumes: the kubelet writes each file
  as root:root with the item's `mode`, else the volume's `defaultMode`, else 0644.
  With a pod `fsGroup`, it then gives every file that group and adds the read-only
  mask (mode | 0440: these volumes are read-only, pkg/volume SetVolumeOwnership).
- The process runs as runAsUser/runAsGroup (the container's, else the pod's, else the
  image's USER), with the pod's supplementalGroups and its fsGroup as supplementary
  groups.
- The kernel's check: owner bits for the owner, group bits for the file's group among
  the process's groups, other bits otherwise; uid 0 passes any read or write while it
  keeps CAP_DAC_OVERRIDE (a container's default set has it; `drop: [ALL]` removes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROJECTED_KINDS = ("secret", "configMap", "downwardAPI", "projected")
DEFAULT_FILE_MODE = 0o644
READ_ONLY_MASK = 0o440


@dataclass(frozen=True, slots=True)
class File:
    """A file as mounted: owner, group and permission bits."""

    uid: int
    gid: int
    mode: int


@dataclass(frozen=True, slots=True)
class Process:
    """A container's process: its user, primary group, other groups, and whether it
    keeps CAP_DAC_OVERRIDE."""

    uid: int
    gid: int
    groups: frozenset[int]
    dac_override: bool


def process_of(
    pod: dict[str, Any], container: dict[str, Any], image_user: tuple[int, int]
) -> Process:
    """The identity the container's process runs under (`image_user`: the image's
    USER uid:gid, used where neither the container nor the pod sets one)."""
    pod_ctx = pod.get("securityContext", {})
    ctx = container.get("securityContext", {})
    uid = ctx.get("runAsUser", pod_ctx.get("runAsUser", image_user[0]))
    gid = ctx.get("runAsGroup", pod_ctx.get("runAsGroup", image_user[1]))
    groups = set(pod_ctx.get("supplementalGroups", []))
    if "fsGroup" in pod_ctx:
        groups.add(pod_ctx["fsGroup"])
    dropped = set(ctx.get("capabilities", {}).get("drop", []))
    added = set(ctx.get("capabilities", {}).get("add", []))
    dac_override = "DAC_OVERRIDE" in added or not dropped & {"ALL", "DAC_OVERRIDE"}
    return Process(int(uid), int(gid), frozenset(groups), dac_override)


def mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, File]:
    """Every file of the container's Secret/ConfigMap-like mounts that lists its items:
    path in the container -> File as the kubelet writes it."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    fs_group = pod.get("securityContext", {}).get("fsGroup")
    out: dict[str, File] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        kinds = [k for k in PROJECTED_KINDS if k in volume]
        if not kinds:
            continue
        source = volume[kinds[0]]
        default = source.get("defaultMode", DEFAULT_FILE_MODE)
        for item in source.get("items", []):
            mode = item.get("mode", default)
            if fs_group is None:
                file = File(0, 0, mode)
            else:
                file = File(0, int(fs_group), mode | READ_ONLY_MASK)
            out[f"{mount['mountPath'].rstrip('/')}/{item['path']}"] = file
    return out


def permits(process: Process, file: File, want: str) -> bool:
    """Whether the kernel lets `process` open `file` for `want` ("r", "w" or "rw")."""
    if process.uid == 0 and process.dac_override:
        return True
    if process.uid == file.uid:
        bits = file.mode >> 6
    elif file.gid == process.gid or file.gid in process.groups:
        bits = file.mode >> 3
    else:
        bits = file.mode
    needed = (0o4 if "r" in want else 0) | (0o2 if "w" in want else 0)
    return bits & needed == needed
