#!/usr/bin/env bash
# make e2e: the end-to-end suite on a real control plane on loopback (test/e2e, its own Go
# module). The first run on a machine builds etcd, kube-apiserver,
# kube-controller-manager and csi-provisioner into ${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}
# (about 20 minutes on 2 cores); later runs reuse them. EFS_E2E_BUILD=0 skips the suite
# instead of building when they are missing. `make e2e` builds bin/ first, which the suite
# then uses (EFS_E2E_BIN_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

hack/check-manifests.sh

if [[ -z "${EFS_E2E_BIN_DIR:-}" && -x bin/efs-csi-driver && -x bin/efs-emulator ]]; then
	export EFS_E2E_BIN_DIR="$root/bin"
fi
cd test/e2e
# Helpers' unit tests first; then the suite alone, so that -v output streams.
go test -count=1 -race ./cluster/... ./manifests/...
go test -tags e2e -count=1 -timeout 60m -v . "$@"
