# The operator image: the manager (/manager) and the instance agent (/agent), static binaries on
# distroless (nonroot). Every PostgreSQL pod copies the agent out of this image with an init
# container (`/agent install DEST`, see internal/builder/statefulset.go AgentBinary), so the
# bundle lists this image as RELATED_IMAGE_AGENT too.
# Build: make docker-build IMG=<registry>/pgpilot-operator:v<version>
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Copy the Go Modules manifests
COPY go.mod go.mod
COPY go.sum go.sum
# cache deps before building and copying source so that we don't need to re-download as much
# and so that source changes don't invalidate our downloaded layer
RUN go mod download

# Copy the go source
COPY cmd/ cmd/
COPY api/ api/
COPY internal/ internal/

# Static binaries (no cgo) for the target platform. TARGETARCH is left empty by default so that
# they match the platform `docker build` runs for (e.g. linux/arm64 on Apple Silicon).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o manager ./cmd/main.go
# The instance agent runs in the PostgreSQL image, whatever its libc: it must stay static.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o agent ./cmd/agent

# Use distroless as minimal base image to package the manager binary
# Refer to https://github.com/GoogleContainerTools/distroless for more details
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /manager
COPY --from=builder /workspace/agent /agent
USER 65532:65532

ENTRYPOINT ["/manager"]
