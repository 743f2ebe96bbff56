# sluice: multi-stage build. Not built on the development machines (no Docker engine
# there); `make test` lints this file with hadolint (scripts/test-deploy).
#   docker build -t sluice .                             the model comes from a volume
#   docker build --build-arg BAKE_MODEL=1 -t sluice .    the default model inside the image
#   docker run -p 8080:8080 -v /path/to/models:/models -e SLUICE_MODEL=/models/x.gguf sluice
# The server never downloads anything at start: a model is mounted, baked in, or fetched
# beforehand into the models volume by `sluice-fetch-model` (the Deployment's init
# container does this when each pod starts).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
COPY benches benches
COPY openapi openapi
RUN cargo build --release --locked --bin sluice

FROM debian:bookworm-slim
# Debian's stable packages are the pinned set of this base image.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl python3 python3-pip \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 sluice \
 && mkdir -p /models /opt/sluice/models && chown 10001:10001 /models
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY scripts/fetch-model /usr/local/bin/sluice-fetch-model
COPY docker/entrypoint.sh /usr/local/bin/sluice-entrypoint
# BAKE_MODEL=1 fetches the default model (checked by SHA-256) into the image at build time.
ARG BAKE_MODEL=0
RUN if [ "$BAKE_MODEL" = 1 ]; then SLUICE_MODEL_DIR=/opt/sluice/models sluice-fetch-model; fi
USER 10001
# Every flag of `sluice serve` is also an environment variable (SLUICE_*).
ENV SLUICE_HOST=0.0.0.0 \
    SLUICE_PORT=8080 \
    SLUICE_MODEL_DIR=/models \
    SLUICE_LOG_FORMAT=json
EXPOSE 8080
VOLUME ["/models"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["sh", "-c", "curl -fsS http://127.0.0.1:${SLUICE_PORT}/health || exit 1"]
ENTRYPOINT ["/usr/local/bin/sluice-entrypoint"]
