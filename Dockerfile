# syntax=docker/dockerfile:1
# Multi-stage build of every kubedevice binary as a static executable in a minimal, non-root image,
# for users with a Docker engine; `make image` writes the same binaries, at the same paths
# (/usr/local/bin/<binary>), as an OCI archive without one. The same image runs the agent, the
# controller and the Gopher sample plugin; the Deployment or DaemonSet picks the binary with
# `command`. The node agent must run as root on the node (it owns a root-only socket directory,
# like the kubelet's), which its DaemonSet sets explicitly.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
# The CRDs and admission policies that `kubedevice dev` embeds (config/embed.go).
COPY config/ config/
COPY internal/ internal/
COPY pkg/ pkg/
# The version is the chart's appVersion, as `make image` gives it (hack/version.sh); the build
# context has no .git, so the commit is what --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD)
# says, else "unknown".
ARG GIT_COMMIT=""
COPY hack/version.sh hack/
COPY charts/kubedevice/Chart.yaml charts/kubedevice/
RUN mkdir -p /out && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GIT_COMMIT="${GIT_COMMIT}" \
  go build -trimpath -ldflags "-s -w $(hack/version.sh)" -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kubedevice-controller"]
