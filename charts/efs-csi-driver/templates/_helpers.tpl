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
app: efs-csi-{{ .component }}
app.kubernetes.io/name: {{ include "efs-csi.name" .root }}
app.kubernetes.io/instance: {{ include "efs-csi.instance" .root }}
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
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
