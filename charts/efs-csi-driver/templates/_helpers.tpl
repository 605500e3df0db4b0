{{/* The app.kubernetes.io/name of every object: the upstream chart's name, so that its
     selectors (immutable) match and `helm upgrade` from an upstream release works in place. */}}
{{- define "efs-csi.name" -}}
{{ .Values.nameOverride | default "aws-efs-csi-driver" }}
{{- end -}}

{{/* app.kubernetes.io/instance: the release, or "kustomize" in the kustomize manifests. */}}
{{- define "efs-csi.instance" -}}
{{ if .Values.helmLabels }}{{ .Release.Name }}{{ else }}kustomize{{ end }}
{{- end -}}

{{/* Labels shared by every object; the Helm ones are left out of the kustomize manifests. */}}
{{- define "efs-csi.labels" -}}
app.kubernetes.io/name: {{ include "efs-csi.name" . }}
app.kubernetes.io/part-of: efs-csi-driver
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/instance: {{ include "efs-csi.instance" . }}
{{- if .Values.helmLabels }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component (dict "component" "controller"|"node" "root" $):
     upstream's (app: efs-csi-controller|efs-csi-node, name, instance), immutable. */}}
{{- define "efs-csi.selector" -}}
app: {{ include "efs-csi.app" . }}
app.kubernetes.io/name: {{ include "efs-csi.name" .root }}
app.kubernetes.io/instance: {{ include "efs-csi.instance" .root }}
{{- end -}}

{{/* The app label (and, for the controller, the Deployment's name): upstream's
     controller.name for the controller, efs-csi-node for the node plugin. */}}
{{- define "efs-csi.app" -}}
{{- if eq .component "controller" }}{{ .root.Values.controller.name | default "efs-csi-controller" }}{{ else }}efs-csi-{{ .component }}{{ end }}
{{- end -}}

{{/* Labels of a pod template: the selector's, the component, the user's podLabels. No
     version or chart label: a chart upgrade must not restart every pod for a label, as
     upstream's pod templates carry none. */}}
{{- define "efs-csi.podLabels" -}}
{{ include "efs-csi.selector" . }}
app.kubernetes.io/component: {{ .component }}
{{- with (index .root.Values .component).podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Upstream's driver image carried over (its values.yaml or install docs set
     image.repository and image.tag) would run upstream's binary with this chart's flags,
     which it does not know; an image.* key this chart does not take (image.registry,
     image.digest...) would be ignored, running another image than the one asked for. Fail,
     naming every such key at once and the keys to set instead, rather than render a driver
     that exits 2. */}}
{{- define "efs-csi.checkImage" -}}
{{- $repo := toString .Values.image.repository }}
{{- $tag := toString (.Values.image.tag | default "") }}
{{- $bad := list }}
{{- if or (hasSuffix "/aws-efs-csi-driver" $repo) (eq $repo "aws-efs-csi-driver") (contains "/eks/aws-efs-csi-driver" $repo) }}
{{- $bad = append $bad (printf "image.repository %q is upstream's aws-efs-csi-driver image, which does not take this chart's flags" $repo) }}
{{- end }}
{{- if and (or (eq $repo "ghcr.io/efs-csi/efs-csi-driver") (gt (len $bad) 0)) (regexMatch "^v[1-9][0-9]*\\.[0-9]+\\.[0-9]+" $tag) }}
{{- $bad = append $bad (printf "image.tag %q is an upstream aws-efs-csi-driver release, not a tag of this chart's image" $tag) }}
{{- end }}
{{- range $k := keys .Values.image | sortAlpha }}
{{- if not (has $k (list "repository" "tag" "pullPolicy")) }}
{{- $bad = append $bad (printf "image.%s is not a key of this chart (it takes image.repository, image.tag and image.pullPolicy)" $k) }}
{{- end }}
{{- end }}
{{- with $bad }}
{{- fail (printf "%s. Set instead: image.repository: ghcr.io/efs-csi/efs-csi-driver (or your mirror of it, registry included) and image.tag: \"\" (the chart's appVersion, %s), or delete those image keys from your values" (join "; " .) $.Chart.AppVersion) }}
{{- end }}
{{- end -}}

{{/* Log level of a component's sidecars: its logLevel as upstream's chart passes it, else
     sidecarLogLevel. */}}
{{- define "efs-csi.sidecarV" -}}
{{- $v := (index .root.Values .component).logLevel }}
{{- if kindIs "invalid" $v }}{{ .root.Values.sidecarLogLevel }}{{ else }}{{ $v }}{{ end }}
{{- end -}}

{{/* A container's probe: the user's (upstream's livenessProbe/readinessProbe/startupProbe
     keys of the component; {} removes it) when the key is set, else the chart's default.
     dict "values" <component values> "key" "livenessProbe" "default" <map or nil>. */}}
{{- define "efs-csi.probe" -}}
{{- $p := .default }}
{{- if hasKey .values .key }}{{ $p = get .values .key }}{{ end }}
{{- with $p }}{{ $.key }}:
{{ toYaml . | indent 2 }}{{ end }}
{{- end -}}

{{- define "efs-csi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "efs-csi.sidecarImage" -}}
{{ .image.repository }}:{{ .image.tag }}
{{- end -}}

{{/* --tags value: the map rendered as sorted "key:value" pairs separated by spaces. */}}
{{- define "efs-csi.tags" -}}
{{- $pairs := list -}}
{{- range $k := keys .Values.controller.tags | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s:%s" $k (get $.Values.controller.tags $k)) -}}
{{- end -}}
{{- join " " $pairs -}}
{{- end -}}

{{- define "efs-csi.controllerServiceAccount" -}}
{{ .Values.controller.serviceAccount.name }}
{{- end -}}

{{- define "efs-csi.nodeServiceAccount" -}}
{{ .Values.node.serviceAccount.name }}
{{- end -}}

{{/* imagePullSecrets: upstream's list of names, or this chart's list of {name: ...}. */}}
{{- define "efs-csi.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
{{- if kindIs "string" . }}
  - name: {{ . }}
{{- else }}
  - {{ toYaml . | nindent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The controller's metrics address: upstream's controller.enableMetrics serves them on
     the pod network, else controller.metricsBindAddress. */}}
{{- define "efs-csi.controllerMetricsBind" -}}
{{- if .Values.controller.enableMetrics }}0.0.0.0{{ else }}{{ .Values.controller.metricsBindAddress }}{{ end }}
{{- end -}}

{{/* Pod-spec keys of upstream's chart, for one component's values (controller or node):
     dnsConfig, hostAliases, topologySpreadConstraints. */}}
{{- define "efs-csi.podExtras" -}}
{{- with .dnsConfig }}
dnsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .hostAliases }}
hostAliases:
{{- if kindIs "map" . }}
{{- /* Upstream's form: file system ID -> {ip, region}. */}}
{{- range $fs, $a := . }}
  - ip: {{ required (printf "node.hostAliases.%s.ip is required" $fs) $a.ip | quote }}
    hostnames:
      - {{ printf "%s.efs.%s.amazonaws.com" $fs (required (printf "node.hostAliases.%s.region is required" $fs) $a.region) }}
{{- end }}
{{- else }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}
