#!/usr/bin/env bash
# CI checks of the deployment artifacts, offline:
#   1. helm lint --strict of the chart, with default values and with ci/*-values.yaml;
#   2. helm template of both, and every object of the renderings, of deploy/kubernetes and
#      of its examples validated by kubeconform -strict against schemas built from the
#      OpenAPI document of the Kubernetes version the e2e test runs (no network needed);
#   3. deploy/kubernetes/base equals a fresh rendering of the chart.
# The end-to-end test then has the real API server accept every object (server-side dry
# run): kubeconform is the fast first line, the API server the authority.
set -euo pipefail
cd "$(dirname "$0")/.."

paths=$(hack/e2e-components.sh helm kubeconform)
HELM=$(sed -n 's/^EFS_E2E_HELM=//p' <<<"$paths")
KUBECONFORM=$(sed -n 's/^EFS_E2E_KUBECONFORM=//p' <<<"$paths")
K8S_VERSION=$(sed -n 's/^K8S_VERSION=//p' hack/e2e-components.sh)
CACHE="${EFS_E2E_CACHE:-/var/cache/efs-csi-e2e}"
SCHEMAS="$CACHE/kubeconform-schemas-${K8S_VERSION}"
CHART=charts/efs-csi-driver

if [[ ! -f "$SCHEMAS/deployment-apps-v1.json" ]]; then
	swagger="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[ \t]*"Dir": "\(.*\)",$/\1/p')/api/openapi-spec/swagger.json"
	go run ./hack/kubeconform-schemas -swagger "$swagger" -out "$SCHEMAS.tmp"
	rm -rf "$SCHEMAS" && mv "$SCHEMAS.tmp" "$SCHEMAS"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== values.schema.json and files/values-keys.json are generated from values.yaml"
python3 hack/values-schema.py "$tmp/values.schema.json" "$tmp/values-keys.json"
for f in values.schema.json files/values-keys.json; do
	if ! diff -u "$CHART/$f" "$tmp/$(basename "$f")"; then
		echo "$CHART/$f is stale: run python3 hack/values-schema.py" >&2
		exit 1
	fi
done
# A key the chart does not know installs (upstream's chart ignores it) and is named, with
# the known key a misspelt one is close to.
if ! "$HELM" template efs-csi-driver "$CHART" --set controller.replcas=3 >"$tmp/mistyped.yaml" \
	|| ! grep -qF '#   controller.replcas (did you mean controller.replicas?)' "$tmp/mistyped.yaml"; then
	echo "a mistyped value key (controller.replcas) was not named with controller.replicas" >&2
	exit 1
fi

echo "== helm lint"
"$HELM" lint --strict "$CHART"
for values in "$CHART"/ci/*-values.yaml; do
	"$HELM" lint --strict "$CHART" -f "$values"
done

echo "== helm template"
"$HELM" template efs-csi-driver "$CHART" --namespace kube-system >"$tmp/default.yaml"
for values in "$CHART"/ci/*-values.yaml; do
	"$HELM" template efs-csi-driver "$CHART" --namespace kube-system -f "$values" \
		>"$tmp/$(basename "$values" .yaml).yaml"
done

echo "== kubeconform (Kubernetes ${K8S_VERSION})"
# VolumeSnapshotClass is a CRD's kind, not in the OpenAPI document: make e2e applies the
# chart's (ci/snapshots-values.yaml's) to the API server with the CRDs installed.
"$KUBECONFORM" -strict -summary -output text -skip VolumeSnapshotClass \
	-kubernetes-version "${K8S_VERSION#v}" \
	-schema-location "$SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
	"$tmp"/*.yaml deploy/kubernetes/base/efs-csi-driver.yaml deploy/kubernetes/examples/*.yaml

echo "== deploy/kubernetes/base is the chart's rendering"
hack/generate-manifests.sh --stdout >"$tmp/generated.yaml"
if ! diff -u deploy/kubernetes/base/efs-csi-driver.yaml "$tmp/generated.yaml"; then
	echo "deploy/kubernetes/base/efs-csi-driver.yaml is stale: run hack/generate-manifests.sh" >&2
	exit 1
fi
echo "manifests OK"
