# syntax=docker/dockerfile:1
# agentd container image. Targets:
#   docker build -t agentd .                                   # the daemon (default, last stage)
#   docker build -t agentd:with-examples --target with-examples .   # + examples/agentd-example-plugin
# Your own plugins: `FROM agentd` and `RUN pip install <your-plugin>` (see docs/deployment.md).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a wheel of this checkout, installed with its dependencies into /opt/agentd -------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agentd ./agentd
COPY migrations ./migrations
RUN pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/agentd \
 && /opt/agentd/bin/pip install /dist/agentd-*.whl \
 && find /opt/agentd -name '__pycache__' -prune -exec rm -rf {} +

# --- runtime: slim Python, the venv, a non-root user ------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="agentd" \
      org.opencontainers.image.description="Durable AI agent loops on PostgreSQL" \
      org.opencontainers.image.licenses="MIT"
RUN groupadd --system --gid 10001 agentd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/agentd --no-create-home \
      --shell /usr/sbin/nologin agentd \
 && mkdir -p /var/lib/agentd \
 && chown 10001:10001 /var/lib/agentd
COPY --from=build /opt/agentd /opt/agentd
ENV PATH=/opt/agentd/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    AGENTD_HOST=0.0.0.0 \
    AGENTD_PORT=8080 \
    AGENTD_DATA_DIR=/var/lib/agentd \
    AGENTD_LOG_FORMAT=json
# Embedded PostgreSQL (AGENTD_DATABASE_URL unset) keeps its data here; mount a volume.
VOLUME ["/var/lib/agentd"]
WORKDIR /var/lib/agentd
USER 10001:10001
EXPOSE 8080
# agentd drains on SIGTERM: in-flight turns get AGENTD_SHUTDOWN_GRACE seconds, the rest is
# handed back to other workers at once. Give the container at least that plus ~15 s.
STOPSIGNAL SIGTERM
# Liveness of `agentd up` / `agentd api` (a worker-only container serves no HTTP: override
# or disable this check there, as docker-compose.yml does).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('AGENTD_PORT', '8080'), timeout=4)" || exit 1
ENTRYPOINT ["agentd"]
CMD ["up"]

# --- with-examples: the runtime plus the example agent plugin ----------------------------------
FROM runtime AS with-examples
USER root
COPY examples/agentd-example-plugin /tmp/agentd-example-plugin
RUN /opt/agentd/bin/pip install --no-cache-dir /tmp/agentd-example-plugin \
 && rm -rf /tmp/agentd-example-plugin
USER 10001:10001

# --- default target ------------------------------------------------------------------------------
FROM runtime AS agentd
