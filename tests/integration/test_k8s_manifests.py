"""deploy/k8s renders with kustomize, validates strictly, and wires the sidecar as designed.

Skipped without `kubectl` or `kubernetes-validate` (`make k8s-check` installs the
validator into .venv-k8s; CI runs that target unconditionally).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import SETTINGS
from tests.support.kubelet import File, Process, mounted_files, permits, process_of

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
K8S_VERSION = "1.33.0"
GIB = 1 << 30
DOCKERFILE_USER = (10001, 10001)  # the image's USER 10001:10001


def _validator() -> str | None:
    named = os.environ.get("KUBERNETES_VALIDATE")
    local = REPO / ".venv-k8s" / "bin" / "kubernetes-validate"
    return named or (str(local) if local.exists() else shutil.which("kubernetes-validate"))


VALIDATE = _validator()
pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None or VALIDATE is None,
    reason="needs kubectl and kubernetes-validate (make k8s-check)",
)


def render(path: Path) -> str:
    """`kubectl kustomize PATH` output."""
    return subprocess.run(
        ["kubectl", "kustomize", str(path)], check=True, capture_output=True, text=True
    ).stdout


def objects(text: str) -> list[dict[str, Any]]:
    """The rendered documents."""
    return [d for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name (fails if absent)."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def validate(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """kubernetes-validate --strict on one rendering."""
    f = tmp_path / "rendered.yaml"
    f.write_text(text)
    assert VALIDATE is not None
    return subprocess.run(
        [VALIDATE, "-k", K8S_VERSION, "--strict", "--quiet", str(f)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(params=["base", *OVERLAYS])
def rendering(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(name, rendered YAML) of the base and of each overlay."""
    name: str = request.param
    return name, render(K8S / "base" if name == "base" else K8S / "overlays" / name)


def sidecar_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The infercache container of the inference Deployment."""
    spec = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    [sidecar] = [c for c in spec.get("initContainers", []) if c["name"] == "infercache"]
    return dict(sidecar)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """Env entries by name (value, or the valueFrom mapping)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_rendering_is_valid_for_kubernetes(
    tmp_path: Path, rendering: tuple[str, str]
) -> None:
    """The base and each overlay pass strict schema validation for a current Kubernetes."""
    name, text = rendering
    result = validate(tmp_path, text)
    assert result.returncode == 0, f"{name}:\n{result.stdout}{result.stderr}"
    assert "ERROR" not in result.stdout + result.stderr


def test_the_validator_rejects_an_unknown_field_and_a_wrong_type(tmp_path: Path) -> None:
    """Strict validation is not a rubber stamp: a misspelt probe and a string period fail."""
    text = render(K8S / "base")
    misspelt = text.replace("startupProbe:", "startupProbee:", 1)
    wrong_type = text.replace("periodSeconds: 2\n", "periodSeconds: two\n", 1)
    assert misspelt != text
    assert wrong_type != text
    for bad in (misspelt, wrong_type):
        assert validate(tmp_path, bad).returncode != 0


def test_sidecar_is_native_with_grpc_probes(rendering: tuple[str, str]) -> None:
    """infercache is an initContainer with restartPolicy Always, probed over gRPC on its
    health-only port (on the pod IP), with the data plane on loopback only, and runs as
    the image's non-root user."""
    _, text = rendering
    sidecar = sidecar_of(objects(text))
    assert sidecar["restartPolicy"] == "Always"
    env = env_of(sidecar)
    assert env["INFERCACHE_LISTEN"].startswith("127.0.0.1:"), "the data plane stays in the pod"
    health = env["INFERCACHE_HEALTH_LISTEN"]
    assert health.startswith("0.0.0.0:"), "kubelet probes the pod IP"
    health_port = int(health.rsplit(":", 1)[1])
    assert {"name": "health", "containerPort": health_port} in sidecar["ports"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"]["port"] == health_port, probe
    security = sidecar["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001  # the Dockerfile's USER
    assert sidecar["resources"]["limits"]["memory"]
    assert sidecar["resources"]["requests"]["cpu"]


def test_every_infercache_variable_is_a_real_setting(rendering: tuple[str, str]) -> None:
    """Each INFERCACHE_* the manifests set is a setting of this release."""
    name, text = rendering
    known = {s.env for s in SETTINGS}
    env = env_of(sidecar_of(objects(text)))
    assert set(env) - known == set()
    if name == "gateway":
        assert env["INFERCACHE_GATEWAY_LISTEN"].startswith("0.0.0.0:")
        assert env["INFERCACHE_GATEWAY_KEYS_FILE"].startswith("/etc/infercache/gateway/")


def _bytes(quantity: str) -> int:
    units = {"Mi": 1 << 20, "Gi": GIB, "MiB": 1 << 20, "GiB": GIB}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def test_only_the_kv_pool_volume_is_shared_and_it_fits_the_pool(
    rendering: tuple[str, str],
) -> None:
    """Both containers mount one memory-backed emptyDir at INFERCACHE_KV_SHM_DIR, larger
    than the KV pool; it is the only volume they share writable, vLLM's /dev/shm is its
    own; the sidecar's memory limit covers the pool it touches."""
    _, text = rendering
    docs = objects(text)
    spec = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    sidecar, vllm = sidecar_of(docs), _containers(docs)["vllm"]
    env = env_of(sidecar)
    pool_dir = env["INFERCACHE_KV_SHM_DIR"]
    pool = _bytes(env["INFERCACHE_KV_POOL_BYTES"])
    names = set()
    for container in (sidecar, vllm):
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == pool_dir]
        shm = volumes[mount["name"]]["emptyDir"]
        assert shm["medium"] == "Memory"
        assert _bytes(shm["sizeLimit"]) > pool
        names.add(mount["name"])
    assert len(names) == 1, "one volume, at the same path in both"

    def writable(c: dict[str, Any]) -> set[str]:
        return {m["name"] for m in c["volumeMounts"] if not m.get("readOnly")}

    assert writable(sidecar) & writable(vllm) == names
    [vllm_shm] = [m for m in vllm["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[vllm_shm["name"]]["emptyDir"]["medium"] == "Memory"
    assert "/dev/shm" not in [m["mountPath"] for m in sidecar["volumeMounts"]]
    assert _bytes(sidecar["resources"]["limits"]["memory"]) > pool


def test_vllm_runs_confined_and_can_still_map_the_kv_pool(rendering: tuple[str, str]) -> None:
    """vLLM's container runs as a non-root user without privilege escalation or
    capabilities, on a read-only root filesystem, under RuntimeDefault seccomp, with a
    writable HOME; and that user may read and write the KV pool file the sidecar
    creates (mode 0600, owned by the sidecar's user)."""
    _, text = rendering
    docs = objects(text)
    pod = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    vllm = _containers(docs)["vllm"]
    ctx = vllm["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] != 0
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert "add" not in ctx["capabilities"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["seccompProfile"]["type"] == "RuntimeDefault"
    home = env_of(vllm)["HOME"]
    writable = [m["mountPath"] for m in vllm["volumeMounts"] if not m.get("readOnly")]
    assert any(home == w or home.startswith(w + "/") for w in writable), home
    sidecar_user = process_of(pod, sidecar_of(docs), DOCKERFILE_USER)
    pool_file = File(sidecar_user.uid, sidecar_user.gid, 0o600)  # torch_pool.py's chmod
    assert permits(process_of(pod, vllm, (0, 0)), pool_file, "rw")


def test_admin_tokens_come_from_a_secret_file(rendering: tuple[str, str]) -> None:
    """INFERCACHE_ADMIN_TOKENS_FILE names a file inside a Secret volume; no token is inline."""
    _, text = rendering
    docs = objects(text)
    spec = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    sidecar = sidecar_of(docs)
    env = env_of(sidecar)
    assert "INFERCACHE_ADMIN_TOKENS" not in env
    path = Path(env["INFERCACHE_ADMIN_TOKENS_FILE"])
    [mount] = [m for m in sidecar["volumeMounts"] if m["mountPath"] == str(path.parent)]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert [i["path"] for i in volume["secret"]["items"]] == [path.name]


def test_admin_port_is_open_only_to_the_pipeline_namespace(rendering: tuple[str, str]) -> None:
    """The NetworkPolicy admits the admin port only from a namespace selector, and
    /metrics only from another; no rule without `from` opens either."""
    _, text = rendering
    policy = one(objects(text), "NetworkPolicy", "inference")["spec"]
    for port in ("admin", "metrics"):
        rules = [r for r in policy["ingress"] if port in [p["port"] for p in r.get("ports", [])]]
        assert len(rules) == 1, port
        [source] = rules[0]["from"]
        assert set(source) == {"namespaceSelector"}, port
    opened = {p["port"] for r in policy["ingress"] for p in r.get("ports", [])}
    assert not opened & {"grpc", "health", 50051, 8081}, opened


def test_service_monitor_scrapes_the_metrics_port(rendering: tuple[str, str]) -> None:
    """The ServiceMonitor (no bundled schema) selects a Service that has its port, and
    that port reaches the container port the sidecar serves /metrics on."""
    _, text = rendering
    docs = objects(text)
    monitor = one(docs, "ServiceMonitor", "infercache")["spec"]
    wanted = monitor["selector"]["matchLabels"]
    services = [
        d
        for d in docs
        if d["kind"] == "Service" and wanted.items() <= d["metadata"].get("labels", {}).items()
    ]
    assert len(services) == 1
    [endpoint] = monitor["endpoints"]
    assert endpoint["path"] == "/metrics"
    [port] = [p for p in services[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
    sidecar = sidecar_of(docs)
    [container_port] = [p for p in sidecar["ports"] if p["name"] == port["targetPort"]]
    metrics_listen = env_of(sidecar)["INFERCACHE_METRICS_LISTEN"]
    assert metrics_listen == f"0.0.0.0:{container_port['containerPort']}"


def test_dashboard_configmap_holds_the_repository_dashboard(rendering: tuple[str, str]) -> None:
    """The Grafana ConfigMap is generated from deploy/grafana/infercache.json, unchanged."""
    _, text = rendering
    cm = one(objects(text), "ConfigMap", "infercache-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["infercache.json"] == (REPO / "deploy/grafana/infercache.json").read_text()


def test_redis_overlays_set_the_warm_tier() -> None:
    """dev-redis points at its own StatefulSet's Service; external-redis reads the URL
    from the Secret; the base keeps the embedded store."""
    base = env_of(sidecar_of(objects(render(K8S / "base"))))
    assert "INFERCACHE_REDIS_URL" not in base
    dev = objects(render(K8S / "overlays" / "dev-redis"))
    one(dev, "StatefulSet", "infercache-redis")
    service = one(dev, "Service", "infercache-redis")
    url = env_of(sidecar_of(dev))["INFERCACHE_REDIS_URL"]
    assert url == f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/0"
    external = env_of(sidecar_of(objects(render(K8S / "overlays" / "external-redis"))))
    assert external["INFERCACHE_REDIS_URL"]["secretKeyRef"]["key"] == "redis-url"


def test_every_redis_rendering_mounts_the_fleet_secret_into_the_sidecar_only(
    rendering: tuple[str, str],
) -> None:
    """A sidecar on a shared Redis exits 2 without INFERCACHE_FLEET_SECRET_FILE (issue 25):
    every rendering that sets INFERCACHE_REDIS_URL points it at a file of a mounted
    Secret key `fleet-secret` (a dev value of >= 32 bytes where the overlay generates
    one), and vLLM mounts no volume holding it."""
    name, text = rendering
    docs = objects(text)
    env = env_of(sidecar_of(docs))
    if "INFERCACHE_REDIS_URL" not in env:
        assert "INFERCACHE_FLEET_SECRET_FILE" not in env, name
        return
    path = env["INFERCACHE_FLEET_SECRET_FILE"]
    assert isinstance(path, str), name
    pod = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    containers = _containers(docs)
    volume, item = None, None
    for mount in containers["infercache"]["volumeMounts"]:
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            rest = path[len(mount["mountPath"].rstrip("/")) + 1 :]
            item = next(i for i in volume["secret"]["items"] if i["path"] == rest)
    assert volume is not None, f"{name}: {path} is not a mounted file"
    assert item is not None, f"{name}: {path} is not a mounted file"
    assert item["key"] == "fleet-secret"
    secret = [
        d
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["name"] == volume["secret"]["secretName"]
    ]
    if secret:  # generated (development): long enough for the sidecar to accept it
        assert len(base64.b64decode(secret[0]["data"]["fleet-secret"])) >= 32
    vllm_mounts = {m["name"] for m in containers["vllm"].get("volumeMounts", [])}
    assert volume["name"] not in vllm_mounts, name


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every container of the inference pod (init containers included), by name."""
    spec = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def _secret_value(docs: list[dict[str, Any]], ref: dict[str, Any]) -> bytes:
    """The decoded value a secretKeyRef names, from the Secret in the rendering."""
    ref = ref["secretKeyRef"]
    secret = one(docs, "Secret", ref["name"])
    return base64.b64decode(secret["data"][ref["key"]])


def test_gateway_component_locks_vllm_behind_the_upstream_key() -> None:
    """With components/gateway, vLLM requires an API key (VLLM_API_KEY, its --api-key)
    from a Secret and the gateway sends the same one (INFERCACHE_GATEWAY_UPSTREAM_API_KEY),
    so nobody who reaches pod-IP:8000 skips the tenants' keys; vLLM's probes stay on
    /health, which vLLM serves without a key (it checks /v1/* only); the NetworkPolicy
    admits no other pod to vLLM's port; the overlays without the gateway are unchanged."""
    docs = objects(render(K8S / "overlays" / "gateway"))
    containers = _containers(docs)
    vllm, sidecar = containers["vllm"], containers["infercache"]
    vllm_key, gateway_key = (
        env_of(vllm)["VLLM_API_KEY"],
        env_of(sidecar)["INFERCACHE_GATEWAY_UPSTREAM_API_KEY"],
    )
    assert "secretKeyRef" in vllm_key, "a Secret, never an inline value"
    assert vllm_key == gateway_key
    assert len(_secret_value(docs, vllm_key)) >= 32
    assert not any("--api-key" in a for a in vllm.get("args", [])), "not on the command line"
    # The gateway calls this very vLLM: the sidecar's upstream is vLLM's port on loopback.
    [http] = [p for p in vllm["ports"] if p["name"] == "http"]
    upstream = env_of(sidecar)["INFERCACHE_MODEL_SERVER_URL"]
    assert upstream == f"http://127.0.0.1:{http['containerPort']}"
    for probe in ("readinessProbe", "startupProbe"):
        get = vllm[probe]["httpGet"]
        assert get["port"] in ("http", http["containerPort"]), probe
        assert not get["path"].startswith("/v1"), f"{probe}: vLLM asks a key on /v1/* only"
    policy = one(docs, "NetworkPolicy", "inference")["spec"]
    opened = {p["port"] for r in policy["ingress"] for p in r.get("ports", [])}
    assert not opened & {"http", http["containerPort"]}, opened
    service = one(docs, "Service", "inference")["spec"]["ports"]
    assert [p["targetPort"] for p in service] == ["gateway"]
    for name in ("dev-redis", "external-redis"):
        plain = _containers(objects(render(K8S / "overlays" / name)))
        assert "VLLM_API_KEY" not in env_of(plain["vllm"]), name


def test_the_kubelet_mount_model_itself() -> None:
    """The model refuses what the kernel refuses: a root-owned 0440 file for another
    user without the group, and root once ALL capabilities are dropped."""
    secret = File(0, 0, 0o440)
    user = Process(10001, 10001, frozenset(), dac_override=False)
    assert not permits(user, secret, "r")
    assert permits(Process(10001, 10001, frozenset({0}), False), secret, "r")
    assert permits(Process(0, 0, frozenset(), dac_override=True), File(10001, 10001, 0o600), "rw")
    assert not permits(Process(0, 0, frozenset(), dac_override=False), File(10001, 1, 0o600), "r")
    pod = {
        "securityContext": {"fsGroup": 2000},
        "volumes": [
            {"name": "s", "secret": {"defaultMode": 0o400, "items": [{"key": "k", "path": "f"}]}}
        ],
    }
    container = {"volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}
    assert mounted_files(pod, container) == {"/etc/s/f": File(0, 2000, 0o440)}
    assert process_of(pod, {}, (10001, 10001)).groups == {2000}


def test_every_container_can_read_the_secret_files_mounted_into_it(
    rendering: tuple[str, str],
) -> None:
    """As the kubelet mounts them (defaultMode 0440, root-owned, the pod's fsGroup as
    group), each Secret file a container mounts is readable by the user it runs as:
    without an fsGroup the non-root sidecar (uid 10001) could not read its admin tokens
    and `infercache serve` exited 2."""
    name, text = rendering
    docs = objects(text)
    pod = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    checked = 0
    for container in _containers(docs).values():
        process = process_of(pod, container, DOCKERFILE_USER)
        for path, file in mounted_files(pod, container).items():
            assert file.mode & 0o007 == 0, f"{name}: {path} readable by any user"
            assert permits(process, file, "r"), f"{name}: {container['name']} cannot read {path}"
            checked += 1
    assert checked >= 1
    # The ownership change skips a volume whose root already has the group (the weights).
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"


def test_production_overlay_serves_the_admin_plane_over_mtls() -> None:
    """external-redis (production) adds components/admin-tls: the admin listener's
    certificate, key and client CA are files of a mounted Secret (readable by the
    sidecar: see the Secret-files test), so tokens never cross the network in clear;
    the development overlays stay plaintext (no CA can ship in this repository)."""
    docs = objects(render(K8S / "overlays" / "external-redis"))
    pod = one(docs, "Deployment", "inference")["spec"]["template"]["spec"]
    sidecar = sidecar_of(docs)
    env = env_of(sidecar)
    files = mounted_files(pod, sidecar)
    for name in ("CERT", "KEY", "CLIENT_CA"):
        assert env[f"INFERCACHE_ADMIN_TLS_{name}_FILE"] in files, name
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in sidecar["volumeMounts"] if m["mountPath"] == "/etc/infercache/admin-tls"]
    assert volumes[mount["name"]]["secret"]["secretName"] == "infercache-admin-tls"
    for name in ("dev-redis", "gateway"):
        assert "INFERCACHE_ADMIN_TLS_CERT_FILE" not in env_of(
            sidecar_of(objects(render(K8S / "overlays" / name)))
        )
