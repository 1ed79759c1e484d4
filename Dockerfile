# vpol operator image.
#
# Build: tests/image/build (starts dockerd if needed and makes the base locally when the pinned one
# cannot be pulled), or plainly `docker build -t vpol:dev .`. Run: the entrypoint is `vpol run`.
# The runtime stage has no shell and no package manager; it runs as a numeric non-root user and
# needs no writable root filesystem (bytecode is compiled at build time, /tmp is an emptyDir).
#
# Everything is installed into a virtual environment at /opt/vpol, copied whole between stages, so
# the image does not depend on where the base's pip puts console scripts (Debian's python puts them
# under <prefix>/local/bin, the official python images under <prefix>/bin). Build and runtime stages
# use the same base, so the environment's python link resolves in both.

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/vpol
WORKDIR /src
# Dependencies first, from the project metadata alone (a stand-in package), so this layer is reused
# until pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN mkdir -p operator/vpol && touch operator/vpol/__init__.py \
 && /opt/vpol/bin/pip install . \
 && /opt/vpol/bin/pip uninstall -y vpol-operator \
 && rm -rf build operator
# Then the project itself: the same metadata the README installs from.
COPY operator ./operator
# Size: the kubernetes package ships an asyncio twin of its whole generated client (kubernetes/aio,
# 66 MB with bytecode) that vpol never imports (it uses the synchronous client; Kopf brings aiohttp),
# and its generated client is kept as bytecode only (33 MB of generated sources).
RUN /opt/vpol/bin/pip install --no-deps . \
 && /opt/vpol/bin/pip uninstall -y pip setuptools wheel \
 && rm -rf /opt/vpol/lib/python3*/site-packages/kubernetes/aio \
 && /opt/vpol/bin/python -m compileall -q -b -j 0 /opt/vpol/lib/python3*/site-packages/kubernetes \
 && find /opt/vpol/lib/python3*/site-packages/kubernetes -name '*.py' -delete \
 && find /opt/vpol -depth -name '__pycache__' -type d -exec rm -rf {} + \
 && /opt/vpol/bin/python -m compileall -q -j 0 /opt/vpol

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vpol" \
      org.opencontainers.image.description="Kyverno-compatible ValidatingPolicy operator" \
      org.opencontainers.image.source="https://example.invalid/vpol" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/vpol /opt/vpol
# No shell or package tools at run time: remove them (the last RUN of this stage).
RUN rm -rf /usr/bin/apt* /usr/bin/dpkg* /var/lib/apt /var/cache/apt /var/lib/dpkg \
           /bin/bash /bin/dash /bin/sh /usr/bin/bash /usr/bin/dash /usr/bin/sh
ENV PATH=/opt/vpol/bin:/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["/opt/vpol/bin/vpol", "run"]

# Development image for the Tilt loop: sources live in /src/operator (synced by Tilt) and
# `vpol run --reload` restarts itself when they change.
FROM ${PYTHON_IMAGE} AS dev
COPY --from=build /opt/vpol /opt/vpol
COPY --chown=65532:65532 operator /src/operator
ENV PATH=/opt/vpol/bin:/usr/local/bin:/usr/bin:/bin PYTHONPATH=/src/operator PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["/opt/vpol/bin/python", "-m", "vpol.cli.main", "run", "--reload"]

# The default target is the production image.
FROM runtime
