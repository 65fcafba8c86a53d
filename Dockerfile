# syntax=docker/dockerfile:1
# paygate: one image for `paygate api`, `paygate worker` and `paygate migrate`
# (docker-compose.yml runs each as its own service).

# --- build: a static binary (pure-Go SQLite, no cgo) ---
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/paygate ./cmd/paygate

# --- run: distroless static, non-root, nothing but the binary and CA certs ---
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/paygate /paygate
USER nonroot:nonroot
ENV PAYGATE_PROFILE=production \
    PAYGATE_ADDR=0.0.0.0:8080 \
    WORKER_METRICS_ADDR=0.0.0.0:9091 \
    PAYGATE_DATA_DIR=/tmp/paygate
# 8080: the API with /healthz and /readyz; 9090: the API's /metrics (PAYGATE_METRICS_ADDR, off unless
# set); 9091: the worker's /metrics, /healthz, /readyz. Publish neither metrics port to the public.
EXPOSE 8080 9090 9091
# The image has no shell or curl: the binary probes itself
# (`paygate api healthcheck` or `paygate worker healthcheck` GETs /readyz).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/paygate", "api", "healthcheck"]
ENTRYPOINT ["/paygate"]
CMD ["api"]
