#!/usr/bin/env bash
# Builds (or reuses) the Kubernetes components the end-to-end test runs on loopback:
# etcd, kube-apiserver, kube-controller-manager, csi-provisioner, and csi-snapshotter and
# snapshot-controller with the VolumeSnapshot CRDs, plus the helm and kubeconform tools
# that hack/check-manifests.sh uses.
#
# Every binary lands in ${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}/<name>-<version>/, outside
# the repository, so that a warm run only checks that the files exist (seconds) and CI
# rebuilds only on a fresh machine. A cache entry is written under a temporary name and
# renamed when complete, and each component is built under a lock of its own, so neither
# an interrupted build nor two callers at once (the test suite and a background warm-up)
# leave half a binary or build a component twice.
#
# `go install pkg@version` refuses modules whose go.mod has replace directives (etcd,
# kubernetes and external-provisioner all do), so each component is built in a scratch
# module of its own that requires the component and repeats its replace lines, with local
# (./staging/..., ../api) targets rewritten to the published module at the matching version.
#
# Usage:
#   hack/e2e-components.sh [NAME...]  build what is missing (all, or only the NAMEs among
#                                     etcd kube-apiserver kube-controller-manager
#                                     csi-provisioner csi-snapshotter snapshot-controller
#                                     helm kubeconform), then print
#                                     EFS_E2E_<NAME>=path lines for every component
#   hack/e2e-components.sh --paths    print those lines only (no build, no network)
# Components are built one after another: the machine's cores are shared.
set -euo pipefail

ETCD_VERSION=v3.6.16
K8S_VERSION=v1.37.2
PROVISIONER_VERSION=v6.4.0
SNAPSHOTTER_VERSION=v8.6.0
HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0

CACHE="${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}"

# The staging modules of k8s.io/kubernetes are published as v0.<minor>.<patch>.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"

# name|version|binary: the cache layout, shared by --paths and the builders.
components() {
	cat <<EOF
ETCD|etcd|${ETCD_VERSION}|etcd
KUBE_APISERVER|kube-apiserver|${K8S_VERSION}|kube-apiserver
KUBE_CONTROLLER_MANAGER|kube-controller-manager|${K8S_VERSION}|kube-controller-manager
CSI_PROVISIONER|csi-provisioner|${PROVISIONER_VERSION}|csi-provisioner
CSI_SNAPSHOTTER|csi-snapshotter|${SNAPSHOTTER_VERSION}|csi-snapshotter
SNAPSHOT_CONTROLLER|snapshot-controller|${SNAPSHOTTER_VERSION}|snapshot-controller
SNAPSHOT_CRDS|snapshot-crds|${SNAPSHOTTER_VERSION}|crds
HELM|helm|${HELM_VERSION}|helm
KUBECONFORM|kubeconform|${KUBECONFORM_VERSION}|kubeconform
EOF
}

print_paths() {
	local key name version bin
	while IFS='|' read -r key name version bin; do
		echo "EFS_E2E_${key}=${CACHE}/${name}-${version}/${bin}"
	done < <(components)
}

if [[ "${1:-}" == "--paths" ]]; then
	print_paths
	exit 0
fi

WANTED=("$@")
# wanted BIN: whether BIN was asked for (everything is, when nothing is named).
wanted() {
	((${#WANTED[@]} == 0)) && return 0
	local w
	for w in "${WANTED[@]}"; do
		[[ "$w" == "$1" ]] && return 0
	done
	return 1
}

log() { echo "[e2e-components $(date +%H:%M:%S)] $*" >&2; }

# Local Go toolchain only: a component asking for a newer one should fail loudly here.
export GOTOOLCHAIN=local
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

mkdir -p "$CACHE"

# lock NAME: hold (until the calling function returns) a per-component lock, so that two
# callers at once build a component once while one of them can use another meanwhile.
lock() {
	exec {lock_fd}>"$CACHE/.${1}.lock"
	flock "$lock_fd"
}

# replace_lines GOMOD LOCAL_VERSION SKIP_REGEX: the replace directives of GOMOD as
# `go mod edit -replace` arguments; a local-path target becomes the replaced module itself
# at LOCAL_VERSION; modules matching SKIP_REGEX (not published, or guards such as
# FORBIDDEN_DEPENDENCY) are left out.
replace_lines() {
	local gomod=$1 local_version=$2 skip=$3
	awk '
		/^replace[ \t]*\($/ { inblock = 1; next }
		inblock && /^\)/ { inblock = 0; next }
		inblock && /=>/ { print; next }
		/^replace[ \t]/ && /=>/ { sub(/^replace[ \t]+/, ""); print }
	' "$gomod" | sed 's,//.*$,,' | while read -r old arrow new newver; do
		[[ "$arrow" == "=>" ]] || continue
		if [[ -n "$skip" && "$old" =~ $skip ]]; then
			continue
		fi
		case "$new" in
		./* | ../* | /*)
			[[ "$new" == *FORBIDDEN* ]] && continue
			echo "-replace=${old}=${old}@${local_version}"
			;;
		*)
			if [[ -n "${newver:-}" ]]; then
				echo "-replace=${old}=${new}@${newver}"
			else
				echo "-replace=${old}=${new}"
			fi
			;;
		esac
	done
}

# build_scratch NAME MODULE VERSION LOCAL_VERSION SKIP_REGEX LDFLAGS PKG:BIN...
build_scratch() {
	local name=$1 module=$2 version=$3 local_version=$4 skip=$5 ldflags=$6
	shift 6
	local missing=() asked=0 spec pkg bin lock_fd
	lock "$name"
	for spec in "$@"; do
		bin=${spec##*:}
		wanted "$bin" || continue
		asked=$((asked + 1))
		[[ -x "$CACHE/${bin}-${version}/${bin}" ]] || missing+=("$spec")
	done
	if ((${#missing[@]} == 0)); then
		((asked == 0)) || log "$name $version: cached"
		exec {lock_fd}>&-
		return
	fi
	local start=$SECONDS
	local work
	work=$(mktemp -d "${TMPDIR:-/tmp}/efs-e2e-${name}.XXXXXX")
	log "$name $version: preparing scratch module in $work"
	local gomod
	gomod=$(cd "$work" && go mod download -json "${module}@${version}" | sed -n 's/^[ \t]*"GoMod": "\(.*\)",$/\1/p')
	(
		cd "$work"
		go mod init "efs-csi-e2e/${name}" >/dev/null 2>&1
		go mod edit -require="${module}@${version}"
		mapfile -t replaces < <(replace_lines "$gomod" "$local_version" "$skip")
		if ((${#replaces[@]} > 0)); then
			go mod edit "${replaces[@]}"
		fi
		{
			echo "//go:build tools"
			echo
			echo "package tools"
			echo
			echo "import ("
			for spec in "${missing[@]}"; do
				echo "	_ \"${spec%%:*}\""
			done
			echo ")"
		} >tools.go
		go mod tidy -e >/dev/null
	)
	for spec in "${missing[@]}"; do
		pkg=${spec%%:*}
		bin=${spec##*:}
		local dest="$CACHE/${bin}-${version}"
		local t=$SECONDS
		log "$name $version: building $bin"
		mkdir -p "$dest"
		(cd "$work" && go build -trimpath -ldflags "-s -w $ldflags" -o "$dest/.${bin}.tmp" "$pkg")
		mv -f "$dest/.${bin}.tmp" "$dest/${bin}"
		log "$name $version: $bin built in $((SECONDS - t)) s ($(du -h "$dest/$bin" | cut -f1))"
	done
	rm -rf "$work"
	exec {lock_fd}>&-
	log "$name $version: done in $((SECONDS - start)) s"
}

# go_install NAME MODULE VERSION PKG: for tools whose go.mod has no replace directives.
go_install() {
	local name=$1 module=$2 version=$3 pkg=$4
	local dest="$CACHE/${name}-${version}" lock_fd
	wanted "$name" || return 0
	lock "$name"
	if [[ -x "$dest/$name" ]]; then
		log "$name $version: cached"
		exec {lock_fd}>&-
		return
	fi
	local t=$SECONDS
	log "$name $version: go install"
	local gobin
	gobin=$(mktemp -d "$CACHE/.${name}.XXXXXX")
	GOBIN="$gobin" GOFLAGS= go install -trimpath -ldflags "-s -w" "${pkg}@${version}"
	mkdir -p "$dest"
	mv -f "$gobin/$name" "$dest/$name"
	rmdir "$gobin"
	exec {lock_fd}>&-
	log "$name $version: installed in $((SECONDS - t)) s"
}

build_date=1970-01-01T00:00:00Z
k8s_minor=${K8S_VERSION#v1.}
k8s_minor=${k8s_minor%%.*}
k8s_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X ${p}.gitVersion=${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${k8s_minor}"
	k8s_ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${build_date}"
done

# Small tools first: they are needed by hack/check-manifests.sh long before the
# control plane is.
go_install helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
go_install kubeconform github.com/yannh/kubeconform "$KUBECONFORM_VERSION" github.com/yannh/kubeconform/cmd/kubeconform

build_scratch etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" '' '' \
	go.etcd.io/etcd/server/v3:etcd

build_scratch csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 "$PROVISIONER_VERSION" \
	"$PROVISIONER_VERSION" '' "-X main.version=${PROVISIONER_VERSION}" \
	github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner:csi-provisioner

build_scratch external-snapshotter github.com/kubernetes-csi/external-snapshotter/v8 "$SNAPSHOTTER_VERSION" \
	"$SNAPSHOTTER_VERSION" '' "-X main.version=${SNAPSHOTTER_VERSION}" \
	github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter:csi-snapshotter \
	github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller:snapshot-controller

# The VolumeSnapshot CRDs of the same release (its client module's config/crd), with the
# snapshotter: its controller needs them in the API server.
if wanted csi-snapshotter || wanted snapshot-controller; then
	crds="$CACHE/snapshot-crds-${SNAPSHOTTER_VERSION}/crds"
	if [[ ! -f "$crds/snapshot.storage.k8s.io_volumesnapshots.yaml" ]]; then
		dir=$(go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@${SNAPSHOTTER_VERSION}" |
			sed -n 's/^[ \t]*"Dir": "\(.*\)",$/\1/p')
		mkdir -p "$crds.tmp"
		cp "$dir"/config/crd/snapshot.storage.k8s.io_*.yaml "$crds.tmp/"
		chmod u+w "$crds.tmp"/*
		rm -rf "$crds" && mv "$crds.tmp" "$crds"
		log "snapshot CRDs ${SNAPSHOTTER_VERSION}: copied"
	fi
fi

# sample-cli-plugin and sample-controller are not published at v0.x.y versions.
build_scratch kubernetes k8s.io/kubernetes "$K8S_VERSION" "$K8S_STAGING_VERSION" \
	'^k8s.io/sample-(cli-plugin|controller)$' "$k8s_ldflags" \
	k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager

print_paths
