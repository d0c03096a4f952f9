# infercache sidecar image: `infercache serve` as the entrypoint, run directly (PID 1
# gets SIGTERM and drains for INFERCACHE_GRACE_PERIOD_S), as a non-root user.
#
#   podman build -t infercache .                      # serving image, no torch
#   podman build --build-arg KV=true -t infercache:kv .   # + torch (CPU wheel by default)
#
# BASE must be a Debian bookworm image with python3 (>= 3.11) and its venv module; the
# default is the public python slim image, CI passes a local debootstrap base
# (scripts/image.sh). Both stages use the same BASE, so the venv built in the first
# runs unchanged in the second.
ARG BASE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG KV=false
# KV=true only: the torch requirement and pip's arguments for it. The default index
# serves CPU wheels (~200 MB); a public PyPI torch is the CUDA build (several GB):
# --build-arg TORCH_PIP_ARGS= (empty) takes that one, --find-links DIR_OR_URL a local wheel.
ARG TORCH=torch==2.13.0
ARG TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY clients/python clients/python
COPY sidecar sidecar
# An optional build secret `cacert` (a CA bundle) is used by pip where TLS to the
# index is intercepted: --secret id=cacert,src=/etc/ssl/certs/ca-certificates.crt
RUN --mount=type=secret,id=cacert \
    set -eu; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    python3 -m venv /opt/infercache; \
    # The events extra (pyzmq, msgspec: INFERCACHE_KV_EVENTS_ENDPOINT) is small and off
    # until that setting names an endpoint.
    /opt/infercache/bin/pip install --quiet ./clients/python '.[events]'; \
    # TORCH_PIP_ARGS unquoted on purpose: it holds several arguments.
    if [ "$KV" = true ]; then \
        /opt/infercache/bin/pip install --quiet $TORCH_PIP_ARGS "$TORCH"; \
    fi; \
    # pip, setuptools and bytecode caches are build leftovers, not part of the runtime.
    /opt/infercache/bin/pip uninstall --quiet --yes pip setuptools; \
    find /opt/infercache -name __pycache__ -prune -exec rm -rf {} +; \
    /opt/infercache/bin/infercache --version

FROM ${BASE}
ARG KV=false
LABEL org.opencontainers.image.title="infercache" \
      org.opencontainers.image.description="gRPC cache sidecar for LLM inference pods" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.infercache.kv="${KV}"
# A numeric, non-root user: Kubernetes' runAsNonRoot can only verify a numeric USER.
RUN useradd --uid 10001 --user-group --home-dir /home/infercache --create-home \
        --shell /usr/sbin/nologin infercache
COPY --from=build /opt/infercache /opt/infercache
# Inside a container nothing but loopback is reachable by default (the setting's own
# default); a pod sets INFERCACHE_LISTEN / _ADMIN_LISTEN / _METRICS_LISTEN to 0.0.0.0:PORT
# for the ports it means to expose (deploy/k8s). Logs are JSON lines on stderr.
# The CPU KV pool lives under INFERCACHE_KV_SHM_DIR (/dev/shm): give the container a
# /dev/shm at least INFERCACHE_KV_POOL_BYTES large (a runtime's default is 64 MiB).
ENV PATH=/opt/infercache/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    INFERCACHE_LOG_FORMAT=json
USER 10001:10001
WORKDIR /home/infercache
EXPOSE 50051 50052 9464
ENTRYPOINT ["/opt/infercache/bin/infercache", "serve"]
