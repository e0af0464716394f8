# syntax=docker/dockerfile:1

# Build the manager binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
# Download the modules first, so that a source change does not redo it.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags='-s -w' -o manager .

# Run it from a minimal image as a non-root user.
FROM gcr.io/distroless/static:nonroot
# test/images builds the same image without Docker; TestDockerfileAgrees
# keeps the two in step (user, entrypoint, working directory, labels).
LABEL org.opencontainers.image.title="fluent-pvc-operator" org.opencontainers.image.description="Per-pod PersistentVolumeClaims from a warm pool, drained before deletion" org.opencontainers.image.source="https://github.com/st-tech/fluent-pvc-operator"
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
