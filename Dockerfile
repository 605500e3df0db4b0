# syntax=docker/dockerfile:1
# check=error=true
#
# One image for both modes of the driver (--mode controller|node), for linux/amd64 and
# linux/arm64, with amazon-efs-utils (mount.efs, mount.s3files, their efs-proxy/stunnel TLS
# tunnel and the watchdog) built from a pinned release:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 -t ghcr.io/efs-csi/efs-csi-driver:0.1.0 --push .
#
# The versions below are hack/versions' (`make image-check` fails when they differ); they
# are ARGs so that a build can try another one without editing this file.
ARG GO_IMAGE=golang:1.26.8-trixie
ARG RUST_IMAGE=rust:1.91.1-slim-trixie
ARG BASE_IMAGE=debian:13.2-slim
ARG EFS_UTILS_VERSION=3.2.0
ARG EFS_UTILS_SHA256=cef35d2e5051262c45ef0288ee51be164c35c87a2ea722c00ac02824e570a79c

# ---- the driver: a static Go binary, cross-compiled on the build machine -------------
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# --version's gitCommit and buildDate (upstream's JSON); .git is not in the context.
ARG GIT_COMMIT=
ARG BUILD_DATE=
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/efs-csi/efs-csi-driver/pkg/version.Version=${VERSION} -X github.com/efs-csi/efs-csi-driver/pkg/version.GitCommit=${GIT_COMMIT} -X github.com/efs-csi/efs-csi-driver/pkg/version.BuildDate=${BUILD_DATE}" \
      -o /out/efs-csi-driver ./cmd/efs-csi-driver

# ---- efs-utils: the release tarball, verified and installed by hack/install-efs-utils.sh --
# Fetched once on the build machine: mount.efs, mount.s3files and the watchdog are Python,
# the same for every platform. The script is the one install step, the tests run it too
# (pkg/node's real-helper test installs the same tarball with it): it checks the pinned
# sha256 and that config.ini and `--version` of each program name the pinned release (a
# moved tag or a mistyped version fails here, not at mount time), and installs into /out as
# the release's build-deb.sh does, the static files in /etc/amazon/efs-static-files.
FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS efs-utils-src
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl python3 \
 && rm -rf /var/lib/apt/lists/*
ARG EFS_UTILS_VERSION
ARG EFS_UTILS_SHA256
COPY hack/versions hack/install-efs-utils.sh /hack/
WORKDIR /src
RUN curl -fsSL --retry 3 -o /tmp/efs-utils.tar.gz \
      "https://github.com/aws/efs-utils/archive/refs/tags/v${EFS_UTILS_VERSION}.tar.gz" \
 && /hack/install-efs-utils.sh /out /tmp/efs-utils.tar.gz \
 && tar -xzf /tmp/efs-utils.tar.gz --strip-components=1 \
 && rm /tmp/efs-utils.tar.gz

# ---- efs-proxy (Rust), built on the target platform ---------------------------------
# Cross-compiling it would need a target C toolchain for its TLS and jemalloc crates;
# buildx runs this stage under emulation for the other platform instead (slower, simpler).
FROM ${RUST_IMAGE} AS efs-proxy
# golang-go: efs-utils 3.2.0's Cargo.lock has aws-lc-fips-sys (efs-proxy's FIPS TLS), whose
# build runs Go (>= 1.17.13; trixie has 1.24).
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libssl-dev make cmake gcc g++ perl golang-go \
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
# efs-utils as hack/install-efs-utils.sh installed it (build-deb.sh's layout), except the
# configuration: its static files are in /etc/amazon/efs-static-files
# (--efs-utils-static-files-path), copied into /var/amazon/efs (--efs-utils-config-dir-path,
# a host directory in the DaemonSet, so that state of live mounts survives a restart), which
# /etc/amazon/efs, where mount.efs and mount.s3files look, points to.
COPY --from=efs-utils-src /out/sbin/ /sbin/
COPY --from=efs-utils-src /out/usr/bin/ /usr/bin/
COPY --from=efs-utils-src /out/etc/amazon/efs-static-files/ /etc/amazon/efs-static-files/
COPY --from=efs-proxy /out/usr/bin/efs-proxy /usr/bin/efs-proxy
COPY --from=build /out/efs-csi-driver /usr/bin/efs-csi-driver
# The CA bundle efs-utils' iso, isob, isof, isoe and eusc region sections name
# (stunnel_cafile), at its Red Hat path: Debian's bundle.
RUN mkdir -p /var/amazon/efs /var/run/efs /var/log/amazon/efs /etc/pki/ca-trust/extracted/pem \
 && ln -s /var/amazon/efs /etc/amazon/efs \
 && ln -s /etc/ssl/certs/ca-certificates.crt /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem
# The image's own test: every file the node plugin needs is there (hack/image-files.txt,
# which `make image-check` compares with the driver's flag defaults), and mount.efs and
# mount.s3files run with the image's python3 and are the pinned release.
ARG EFS_UTILS_VERSION
COPY hack/image-files.txt /usr/share/efs-csi-driver/image-files.txt
RUN grep -v -e '^#' -e '^$' /usr/share/efs-csi-driver/image-files.txt | while read -r path kind; do \
      case "${kind}" in x) test -x "${path}" ;; f) test -f "${path}" ;; d) test -d "${path}" ;; l) test -L "${path}" ;; *) false ;; esac \
        || { echo "image: missing ${kind} ${path}" >&2; exit 1; }; \
    done \
 && for helper in /sbin/mount.efs /sbin/mount.s3files; do \
      test "$(${helper} --version)" = "${helper} Version: ${EFS_UTILS_VERSION}" \
        || { echo "image: ${helper} is not efs-utils ${EFS_UTILS_VERSION}" >&2; exit 1; }; \
    done \
 && /usr/bin/efs-csi-driver --version
ENTRYPOINT ["/usr/bin/efs-csi-driver"]
