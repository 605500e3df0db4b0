#!/usr/bin/env python3
"""Writes charts/efs-csi-driver/values.schema.json and files/values-keys.json from values.yaml.

The known keys of every object of values.yaml, except the free-form ones (tags, labels,
annotations, resources, selectors, affinity, ...), are its own keys plus the upstream
aws-efs-csi-driver chart's keys at the same place (../shared/reference/upstream-surface.md).
A key outside them does not fail `helm install` (upstream's chart has no schema and ignores
keys it does not know, so its users' values files may carry keys copied from other charts):
templates/values-warnings.yaml and NOTES.txt name it, with the known key it is close to
when it looks mistyped. values-keys.json is that tree of known keys, read by the templates
(.Files: helm keeps values.schema.json from them): an object maps each known key to its
own tree, a free-form object or a leaf is true. The schema lists the same properties (for
editors) and requires each provisionerSecrets item's name. Values are not typed: the
templates accept what upstream's do (a number or a string for durations and counts).

Run after changing values.yaml: python3 hack/values-schema.py [SCHEMA [KEYS]]
(hack/check-manifests.sh fails when the committed files differ from the generated ones).
"""
import json
import os
import sys
import yaml

CHART = os.path.join(os.path.dirname(__file__), "..", "charts", "efs-csi-driver")

# Keys whose values are maps the user fills (any key).
OPEN = {"global", "tags", "podAnnotations", "podLabels", "nodeSelector", "affinity", "annotations",
        "resources", "labels", "updateStrategy", "securityContext", "containerSecurityContext",
        "dnsConfig", "livenessProbe", "readinessProbe", "startupProbe", "rollingUpdate",
        "socketDirVolume", "fileSystemIdRefs", "additionalLabels", "hostAliases"}

# Upstream's keys at each place (accepted; charts/efs-csi-driver/README.md says which act).
UPSTREAM = {
    "": ["nameOverride", "fullnameOverride", "useFIPS", "portRangeUpperBound", "useHelmHooksForCSIDriver",
         "replicaCount", "debugLogs"],
    "controller": ["name", "replicaCount", "enableMetrics", "enablePrometheusAnnotations", "serviceMonitor",
                   "logLevel", "extraCreateMetadata", "hostNetwork", "dnsPolicy", "dnsConfig", "additionalLabels",
                   "revisionHistoryLimit", "volumes", "volumeMounts", "socketDirVolume", "regionalStsEndpoints",
                   "livenessProbe", "readinessProbe", "startupProbe", "securityContext", "containerSecurityContext",
                   "leaderElectionRenewDeadline", "leaderElectionLeaseDuration", "timeout",
                   "topologySpreadConstraints", "fileSystemIdRefs", "rollingUpdate"],
    "controller.podDisruptionBudget": ["minAvailable", "unhealthyPodEvictionPolicy"],
    "node": ["logLevel", "volMetricsRefreshPeriod", "volMetricsFsRateLimit", "hostAliases", "dnsPolicy",
             "dnsConfig", "additionalLabels", "revisionHistoryLimit", "livenessProbe", "readinessProbe",
             "startupProbe", "securityContext", "volumes", "volumeMounts", "kubeletPath", "rollingUpdate",
             "efsUtilsConfOverrides", "s3filesUtilsConfOverrides",
             # Read by upstream's template (hasKey) though its values.yaml does not declare them.
             "efsCloudWatchLogEnabled", "s3filesCloudWatchLogEnabled", "s3filesCloudWatchMetricsEnabled",
             "maxInflightMountCalls", "maxInflightMountCallsOptIn", "volumeAttachLimit", "volumeAttachLimitOptIn",
             "forceUnmountAfterTimeout", "unmountTimeout"],
    "node.serviceAccount": ["disableMutation"],
    "sidecars.csiProvisioner": ["securityContext", "additionalArgs"],
    "sidecars.nodeDriverRegistrar": ["securityContext"],
    "sidecars.livenessProbe": ["securityContext"],
}


# Helm's own key: a parent chart's global values reach every subchart.
HELM = {"": ["global"]}


# Lists of objects whose items admit exactly the keys of the default's first item.
ITEMS = {"controller.provisionerSecrets": ["name"]}


def schema(value, path):
    key = path.rsplit(".", 1)[-1]
    if path in ITEMS:
        item = schema(value[0], path + "[]")
        return {"type": "array", "items": {**item, "required": ITEMS[path]}}
    if not isinstance(value, dict) or key in OPEN:
        return {}
    props = {k: schema(v, f"{path}.{k}" if path else k) for k, v in value.items()}
    for k in UPSTREAM.get(path, []) + HELM.get(path, []):
        props.setdefault(k, {})
    return {"type": "object", "properties": dict(sorted(props.items()))}


def known(s):
    """The tree of known keys of schema s: a map per closed object, true for the rest."""
    if s.get("type") != "object":
        return True
    return {k: known(v) for k, v in s["properties"].items()}


with open(os.path.join(CHART, "values.yaml")) as f:
    values = yaml.safe_load(f)
out = schema(values, "")
out = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "efs-csi-driver chart values", **out}
with open(sys.argv[1] if len(sys.argv) > 1 else os.path.join(CHART, "values.schema.json"), "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
with open(sys.argv[2] if len(sys.argv) > 2 else os.path.join(CHART, "files", "values-keys.json"), "w") as f:
    json.dump(known(out), f, indent=1, sort_keys=True)
    f.write("\n")
