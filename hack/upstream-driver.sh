#!/usr/bin/env bash
# Prints the path of upstream's driver v3.4.1, built from its source in
# ../shared/fixtures (sha256-checked) into the cache make e2e fills, as
# test/e2e's upstreamDriver builds it (the same directory and lock: either
# reuses the other's build). The build fetches upstream's modules from the
# Go module proxy once; after that, nothing.
set -euo pipefail
SHA=586ad3498891e7810ca33def30d5a25b55ccbbcbdab2018a3a32e0fae7b96eb1
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SRC="${EFS_UPSTREAM_SOURCE:-$REPO/../shared/fixtures/aws-efs-csi-driver-src-3.4.1.tar.gz}"
CACHE="${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}"
DIR="$CACHE/aws-efs-csi-driver-v3.4.1-${SHA:0:16}"
BIN="$DIR/aws-efs-csi-driver"
if [[ -x "$BIN" ]]; then
	echo "$BIN"
	exit 0
fi
[[ -f "$SRC" ]] || { echo "upstream-driver: no upstream source at $SRC (set EFS_UPSTREAM_SOURCE)" >&2; exit 1; }
echo "$SHA  $SRC" | sha256sum -c --quiet - >&2
mkdir -p "$DIR"
exec {lock}>"$CACHE/.aws-efs-csi-driver.lock"
flock "$lock"
if [[ ! -x "$BIN" ]]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	tar -xzf "$SRC" -C "$work"
	(cd "$work/aws-efs-csi-driver-3.4.1" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local \
		go build -ldflags="-s -w" -o "$DIR/.aws-efs-csi-driver.tmp" ./cmd/) >&2
	mv "$DIR/.aws-efs-csi-driver.tmp" "$BIN"
fi
echo "$BIN"
