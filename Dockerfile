# sluice: multi-stage build. Not built on the development machines (no Docker engine there).
#   docker build -t sluice .
#   docker run -p 8080:8080 -v sluice-models:/models sluice
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
COPY benches benches
COPY openapi openapi
RUN cargo build --release --locked --bin sluice

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl python3 python3-pip \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 sluice \
 && mkdir -p /models && chown sluice:sluice /models
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY scripts/fetch-model /usr/local/bin/sluice-fetch-model
COPY docker/entrypoint.sh /usr/local/bin/sluice-entrypoint
USER sluice
# Every flag of `sluice serve` is also an environment variable (SLUICE_*).
ENV SLUICE_HOST=0.0.0.0 \
    SLUICE_PORT=8080 \
    SLUICE_MODEL_DIR=/models \
    SLUICE_LOG_FORMAT=json
EXPOSE 8080
VOLUME ["/models"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${SLUICE_PORT}/health" || exit 1
ENTRYPOINT ["/usr/local/bin/sluice-entrypoint"]
