# syntax=docker/dockerfile:1
#
# One image holding every Turnpike binary: ingest, worker, pushgw and the
# turnpike CLI (the topics Job runs `turnpike topics`). The Kubernetes
# manifests pick the binary with their `command`. Build from the repository
# root (docs/deploy.md):
#
#   docker buildx build -t ghcr.io/turnpike-dev/turnpike:0.1.0 .
#
# The build context leaves out .git, data/, deploy/ and third_party/ferretdb
# (.dockerignore): the binaries need none of them, and GOWORK=off keeps the
# root go.work (which names ./deploy) out of the build.

# Keep equal to the go directive of go.mod (a test in deploy/ checks it).
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Never fetch another toolchain: the image's is the one go.mod names.
ENV GOTOOLCHAIN=local
COPY . .
# No separate `go mod download` layer: it would fetch every module of the
# build list, the patched FerretDB's backends included, which no binary here
# needs. The cache mounts keep modules and compiled packages between builds.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOWORK=off GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/ingest ./cmd/worker ./cmd/pushgw ./cmd/turnpike

# Static binaries on distroless: no shell, no package manager, CA
# certificates and tzdata included.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
# distroless's nonroot user, by number so that Kubernetes can verify
# runAsNonRoot without a passwd lookup.
USER 65532:65532
EXPOSE 8080 8081 8082
# No ENTRYPOINT: each manifest sets its command. Without one, the image
# prints the CLI's usage.
CMD ["/usr/local/bin/turnpike", "help"]
