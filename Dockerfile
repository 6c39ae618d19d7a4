# horae's image (docs/how-to/deploying.md): `docker build -t horae .` or `podman build -t horae .`.
# Two stages: `build` installs horae and its extras from wheels into a virtualenv; the final
# stage copies only that virtualenv onto the same base (no compiler, no pip cache, no source
# tree) and runs as an unprivileged user with `horae` as the entry point:
#   docker run horae worker --app myapp --health-port 8081 --metrics-port 9464
# BASE: a Debian-based image with python3 (3.11+) and its venv module (the default), or the
# one `make test-deploy` builds from Debian packages (mmdebstrap) where no registry answers.
# EXTRAS: add "analytics" (PySpark; the nightly report also needs a Java 17+ runtime) if this
# image runs `horae report`.
ARG BASE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG EXTRAS=otel,console
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/horae
WORKDIR /src
COPY pyproject.toml README.md ./
COPY horae ./horae
COPY scheduler ./scheduler
COPY listeners ./listeners
COPY audit ./audit
COPY console ./console
# --only-binary: a dependency without a wheel fails the build here instead of pulling in a
# compiler. A package index behind a private CA: `--secret id=pip_ca,src=/path/ca-bundle.crt`.
RUN --mount=type=secret,id=pip_ca \
    if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && /opt/horae/bin/pip install --only-binary=:all: ".[${EXTRAS}]" \
 && /opt/horae/bin/horae --help > /dev/null

FROM ${BASE} AS runtime
COPY --from=build /opt/horae /opt/horae
RUN groupadd --system --gid 10001 horae \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/horae --create-home --shell /usr/sbin/nologin horae
# In a container the health and metrics ports listen on every interface by default
# (scheduler/observe/health.py bind_host); the console's address is given by its command.
ENV PATH=/opt/horae/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HORAE_DATA_DIR=/var/lib/horae
WORKDIR /var/lib/horae
USER 10001:10001
# console, health (worker and relay), metrics
EXPOSE 8080 8081 9464
ENTRYPOINT ["horae"]
CMD ["--help"]
