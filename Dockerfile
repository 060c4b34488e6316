# syntax=docker/dockerfile:1
# braid: build once, fetch the default model at build time, run as a non-root user.

FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The image may run on another CPU than the one that built it: a portable baseline for the
# compiler; braid's int8 kernel still picks AVX-512 VNNI at run time where the CPU has it.
ENV RUSTFLAGS="-C target-cpu=x86-64-v2"
RUN scripts/fetch-model.sh && cargo build --release --locked --bin braid

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app braid
WORKDIR /app
COPY --from=build /src/target/release/braid /usr/local/bin/braid
COPY --from=build /src/models/SmolLM2-135M-Instruct.Q4_1.gguf /app/models/SmolLM2-135M-Instruct.Q4_1.gguf
USER braid
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/health || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["braid", "serve", "--host", "0.0.0.0", "--port", "8080"]
