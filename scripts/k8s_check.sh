#!/usr/bin/env bash
# Render deploy/k8s/base and every overlay with `kubectl kustomize` and validate each
# rendering offline with `kubernetes-validate --strict` against Kubernetes $K8S_VERSION
# (unknown fields and wrong types fail). Renderings are left in $OUT_DIR for review.
# KUBERNETES_VALIDATE names the validator (default: the one `make k8s-check` installs).
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=${K8S_VERSION:-1.33.0}
OUT_DIR=${OUT_DIR:-build/k8s}
VALIDATE=${KUBERNETES_VALIDATE:-.venv-k8s/bin/kubernetes-validate}
command -v kubectl >/dev/null || { echo "k8s-check: kubectl not found" >&2; exit 1; }
mkdir -p "$OUT_DIR"
status=0
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  out="$OUT_DIR/$name.yaml"
  kubectl kustomize "$dir" >"$out"
  objects=$(grep -c '^kind:' "$out")
  # --quiet: failures and warnings only (the ServiceMonitor CRD has no bundled schema:
  # tests/integration/test_k8s_manifests.py checks it against the Service instead).
  if report=$("$VALIDATE" -k "$K8S_VERSION" --strict --quiet "$out" 2>&1) \
      && ! grep -q '^ERROR' <<<"$report"; then
    echo "k8s: $dir rendered ($objects objects) and valid for Kubernetes $K8S_VERSION (--strict)"
  else
    echo "k8s: $dir INVALID for Kubernetes $K8S_VERSION:" >&2
    status=1
  fi
  [ -n "$report" ] && sed 's/^/    /' <<<"$report"
done
exit $status
