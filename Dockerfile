# vpol operator image.
#
# Build: docker build -t vpol:dev .    Run: the entrypoint is `vpol run` (flags may follow).
# The runtime stage has no shell and no package manager; it runs as a numeric non-root
# user and needs no writable root filesystem (Python writes no bytecode, /tmp is an emptyDir).

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# The same project metadata the README installs from; into a self-contained prefix.
RUN python -m pip install --prefix=/install . \
 && python -m compileall -q /install

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vpol" \
      org.opencontainers.image.description="Kyverno-compatible ValidatingPolicy operator" \
      org.opencontainers.image.source="https://example.invalid/vpol" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /install /usr/local
# No shell needed at run time: remove it and the package tools from the final image.
RUN rm -rf /usr/bin/apt* /usr/bin/dpkg* /var/lib/apt /var/cache/apt /bin/bash /bin/dash /bin/sh
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/vpol", "run"]

# Development image for the Tilt loop: sources live in /src/operator (synced by
# Tilt) and `vpol run --reload` restarts itself when they change.
FROM ${PYTHON_IMAGE} AS dev
COPY --from=build /install /usr/local
COPY --chown=65532:65532 operator /src/operator
ENV PYTHONPATH=/src/operator PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["python", "-m", "vpol.cli.main", "run", "--reload"]

# The default target is the production image.
FROM runtime
