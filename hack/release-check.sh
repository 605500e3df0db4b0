#!/usr/bin/env bash
# make release-check: what the release workflow (.github/workflows/release.yml) builds and
# publishes, checked here without a container engine or a registry (docs/release.md):
#   1. every version string agrees with VERSION (internal/release's test);
#   2. every binary (cmd/*) cross-built for linux/amd64 and linux/arm64, CGO_ENABLED=0,
#      stamped with VERSION, the commit and the build date; this machine's run --version;
#   3. the chart: helm lint, kubeconform over its renderings (hack/check-manifests.sh), and
#      helm package, whose chart version and appVersion must be VERSION and whose rendering
#      must name the image tag the workflow pushes;
#   4. actionlint over .github/workflows.
# The binaries go to a temporary directory, or to RELEASE_DIST (the release workflow
# attaches them from there). Tools land in ${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}, as
# hack/e2e-components.sh's do.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}

ACTIONLINT_VERSION=v1.7.12
ARCHES="amd64 arm64"
CACHE="${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}"
CHART=charts/efs-csi-driver
MODULE=github.com/efs-csi/efs-csi-driver

file_version=$(tr -d '[:space:]' <VERSION)
VERSION=${VERSION:-$file_version}
GIT_COMMIT=${GIT_COMMIT:-$(git rev-parse HEAD)}
BUILD_DATE=${BUILD_DATE:-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)}

start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() { echo "== $* ($((SECONDS - start))s)"; }
fail() {
	echo "release-check: $*" >&2
	exit 1
}

step "versions agree with VERSION ${file_version}"
[[ "$VERSION" == "$file_version" ]] || fail "VERSION=${VERSION} given, the VERSION file says ${file_version}"
go test -count=1 ./internal/release

dist=${RELEASE_DIST:-$tmp/dist}
mkdir -p "$dist"
ldflags="-s -w -X ${MODULE}/pkg/version.Version=${VERSION} -X ${MODULE}/pkg/version.GitCommit=${GIT_COMMIT} -X ${MODULE}/pkg/version.BuildDate=${BUILD_DATE}"
cmds=$(cd cmd && ls -d */ | tr -d /)
for arch in $ARCHES; do
	step "cross-build linux/${arch}: $(echo $cmds)"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$tmp/linux-${arch}/" ./cmd/...
	for name in $cmds; do
		bin="$tmp/linux-${arch}/${name}"
		[[ -x "$bin" ]] || fail "no ${name} for linux/${arch}"
		settings=$(go version -m "$bin")
		grep -qP "^\tbuild\tGOARCH=${arch}$" <<<"$settings" || fail "${name}: not built for ${arch}"
		grep -qP '^\tbuild\tCGO_ENABLED=0$' <<<"$settings" || fail "${name}: not CGO_ENABLED=0"
		if [[ "$arch" == "$(go env GOHOSTARCH)" ]]; then
			out=$("$bin" --version) || fail "${name} --version: exit $?"
			grep -qE "\"(driverVersion|version)\": \"${VERSION}\"" <<<"$out" || fail "${name} --version does not say ${VERSION}: ${out}"
			grep -qF "\"gitCommit\": \"${GIT_COMMIT}\"" <<<"$out" || fail "${name} --version does not say ${GIT_COMMIT}: ${out}"
		fi
		cp "$bin" "$dist/${name}-${VERSION}-linux-${arch}"
	done
done
ls -l "$dist"

step "chart: helm lint and kubeconform (hack/check-manifests.sh)"
bash hack/check-manifests.sh

step "chart: helm package"
HELM=$(hack/e2e-components.sh --paths | sed -n 's/^EFS_E2E_HELM=//p')
"$HELM" package "$CHART" --destination "$tmp/chart"
pkg="$tmp/chart/efs-csi-driver-${VERSION}.tgz"
[[ -f "$pkg" ]] || fail "helm package made $(ls "$tmp/chart"), not efs-csi-driver-${VERSION}.tgz"
meta=$("$HELM" show chart "$pkg")
grep -qx "version: ${VERSION}" <<<"$meta" || fail "packaged chart version is not ${VERSION}: ${meta}"
grep -qE "^appVersion: \"?${VERSION}\"?$" <<<"$meta" || fail "packaged chart appVersion is not ${VERSION}: ${meta}"
images=$("$HELM" template efs-csi-driver "$pkg" --namespace kube-system | sed -n 's/^ *image: *//p' | grep '/efs-csi-driver:' | sort -u)
[[ "$images" == "ghcr.io/efs-csi/efs-csi-driver:${VERSION}" ]] \
	|| fail "the packaged chart renders ${images:-no driver image}, not ghcr.io/efs-csi/efs-csi-driver:${VERSION}"
echo "efs-csi-driver-${VERSION}.tgz: version ${VERSION}, appVersion ${VERSION}, image ${images}"
[[ -z "${RELEASE_DIST:-}" ]] || cp "$pkg" "$dist/"

step "actionlint ${ACTIONLINT_VERSION} over .github/workflows"
dir="$CACHE/actionlint-${ACTIONLINT_VERSION}"
ACTIONLINT="$dir/actionlint"
if [[ ! -x "$ACTIONLINT" ]]; then # installed beside, then renamed: no half binary
	rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
	GOBIN="$dir.tmp" go install "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
	rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
[[ ${#workflows[@]} -gt 0 ]] || fail "no workflows in .github/workflows"
"$ACTIONLINT" -no-color "${workflows[@]}"
echo "${workflows[*]}: OK"

step "release-check OK: ${VERSION} (commit ${GIT_COMMIT}), in $((SECONDS - start))s"
