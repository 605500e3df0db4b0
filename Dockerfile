# syntax=docker/dockerfile:1
# check=error=true
#
# One image for both modes of the driver (--mode controller|node), for linux/amd64 and
# linux/arm64, with amazon-efs-utils (mount.efs, its efs-proxy/stunnel TLS tunnel and the
# watchdog) built from a pinned release:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 -t ghcr.io/efs-csi/efs-csi-driver:0.1.0 --push .
#
# The versions below are hack/versions' (`make image-check` fails when they differ); they
# are ARGs so that a build can try another one without editing this file.
ARG GO_IMAGE=golang:1.26.8-trixie
ARG RUST_IMAGE=rust:1.91.1-slim-trixie
ARG BASE_IMAGE=debian:13.2-slim
ARG EFS_UTILS_VERSION=2.3.1
ARG EFS_UTILS_SHA256=ced12f82e76f9740476b63f30c49bd76cc00b6375e12a9f5f7ba852635c49e15

# ---- the driver: a static Go binary, cross-compiled on the build machine -------------
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/efs-csi/efs-csi-driver/pkg/driver.Version=${VERSION}" \
      -o /out/efs-csi-driver ./cmd/efs-csi-driver

# ---- efs-utils source: the release tarball, verified against its pinned sha256 --------
# Fetched once on the build machine: the sources are the same for every platform.
FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS efs-utils-src
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
ARG EFS_UTILS_VERSION
ARG EFS_UTILS_SHA256
WORKDIR /src
# The tarball's own version file must name the pinned release too: a tag that was moved
# or a mistyped version fails here, not at mount time.
RUN curl -fsSL --retry 3 -o /tmp/efs-utils.tar.gz \
      "https://github.com/aws/efs-utils/archive/refs/tags/v${EFS_UTILS_VERSION}.tar.gz" \
 && echo "${EFS_UTILS_SHA256}  /tmp/efs-utils.tar.gz" | sha256sum -c - \
 && tar -xzf /tmp/efs-utils.tar.gz --strip-components=1 \
 && rm /tmp/efs-utils.tar.gz \
 && grep -qx "version=${EFS_UTILS_VERSION}" config.ini

# ---- efs-proxy (Rust), built on the target platform ---------------------------------
# Cross-compiling it would need a target C toolchain for its TLS and jemalloc crates;
# buildx runs this stage under emulation for the other platform instead (slower, simpler).
FROM ${RUST_IMAGE} AS efs-proxy
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libssl-dev make cmake gcc g++ perl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=efs-utils-src /src/src/proxy /src/proxy
WORKDIR /src/proxy
ARG TARGETARCH
# jemalloc fixes the page size at compile time and aborts on a kernel with larger pages:
# on arm64 (4, 16 or 64 KiB pages) build for 64 KiB, which runs on all three.
RUN if [ "${TARGETARCH}" = "arm64" ]; then export JEMALLOC_SYS_WITH_LG_PAGE=16; fi \
 && cargo build --release --locked \
 && install -D -m 0755 target/release/efs-proxy /out/usr/bin/efs-proxy

# ---- runtime --------------------------------------------------------------------------
FROM ${BASE_IMAGE}
# mount.efs and the watchdog are Python; NFS client, stunnel (the `stunnel` mount option),
# openssl (client certificates for IAM) and botocore (IAM, cross-account) as efs-utils
# needs them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates nfs-common stunnel4 openssl \
      python3 python3-botocore util-linux procps \
 && rm -rf /var/lib/apt/lists/*
# efs-utils installed as its build-deb.sh installs it, except the configuration: its
# static files go to /etc/amazon/efs-static-files (--efs-utils-static-files-path), to be
# copied into /var/amazon/efs (--efs-utils-config-dir-path, a host directory in the
# DaemonSet, so that state of live mounts survives a restart), which /etc/amazon/efs, where
# mount.efs looks, points to.
COPY --from=efs-utils-src --chmod=0755 /src/src/mount_efs/__init__.py /sbin/mount.efs
COPY --from=efs-utils-src --chmod=0755 /src/src/watchdog/__init__.py /usr/bin/amazon-efs-mount-watchdog
COPY --from=efs-utils-src --chmod=0644 /src/dist/efs-utils.conf /etc/amazon/efs-static-files/efs-utils.conf
COPY --from=efs-utils-src --chmod=0444 /src/dist/efs-utils.crt /etc/amazon/efs-static-files/efs-utils.crt
COPY --from=efs-proxy /out/usr/bin/efs-proxy /usr/bin/efs-proxy
COPY --from=build /out/efs-csi-driver /usr/bin/efs-csi-driver
RUN mkdir -p /var/amazon/efs /var/run/efs /var/log/amazon/efs \
 && ln -s /var/amazon/efs /etc/amazon/efs
# The image's own test: every file the node plugin needs is there (hack/image-files.txt,
# which `make image-check` compares with the driver's flag defaults), and mount.efs runs.
COPY hack/image-files.txt /usr/share/efs-csi-driver/image-files.txt
RUN grep -v -e '^#' -e '^$' /usr/share/efs-csi-driver/image-files.txt | while read -r path kind; do \
      case "${kind}" in x) test -x "${path}" ;; f) test -f "${path}" ;; d) test -d "${path}" ;; l) test -L "${path}" ;; *) false ;; esac \
        || { echo "image: missing ${kind} ${path}" >&2; exit 1; }; \
    done \
 && /sbin/mount.efs --version \
 && /usr/bin/efs-csi-driver --version
ENTRYPOINT ["/usr/bin/efs-csi-driver"]
