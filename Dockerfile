# syntax=docker/dockerfile:1
# One image for both modes of the driver (--mode controller|node).
#
#   docker build -t ghcr.io/efs-csi/efs-csi-driver:0.1.0 --build-arg VERSION=0.1.0 .

# ---- build: a static binary, no cgo --------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/efs-csi/efs-csi-driver/pkg/driver.Version=${VERSION}" \
      -o /out/efs-csi-driver ./cmd/efs-csi-driver

# ---- runtime --------------------------------------------------------------------------
# The controller alone would run on distroless/static. The node plugin mounts with
# `mount -t efs`, i.e. amazon-efs-utils (mount.efs, its stunnel TLS tunnel and watchdog),
# which needs python3, stunnel and the NFS client: hence debian-slim. Debian ships no
# efs-utils package: build its .deb from the amazon-efs-utils sources (`./build-deb.sh`)
# and pass it in with --build-arg EFS_UTILS_DEB=<file in the build context>; without it
# the image can provision (controller) and bind-mount local file systems (--local-root),
# but not mount real EFS.
FROM debian:trixie-slim
ARG EFS_UTILS_DEB=
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates nfs-common stunnel4 python3 util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY ${EFS_UTILS_DEB:-Dockerfile} /tmp/efs-utils.deb
# efs-utils' static files (its CA bundle) move aside: the driver copies them into the host
# configuration directory it links /etc/amazon/efs to (--efs-utils-static-files-path).
RUN if [ -n "${EFS_UTILS_DEB}" ]; then apt-get update && apt-get install -y /tmp/efs-utils.deb && rm -rf /var/lib/apt/lists/*; fi \
 && rm -f /tmp/efs-utils.deb \
 && mkdir -p /etc/amazon/efs-static-files \
 && if [ -d /etc/amazon/efs ]; then cp -a /etc/amazon/efs/. /etc/amazon/efs-static-files/ && rm -rf /etc/amazon/efs; fi
COPY --from=build /out/efs-csi-driver /usr/bin/efs-csi-driver
ENTRYPOINT ["/usr/bin/efs-csi-driver"]
