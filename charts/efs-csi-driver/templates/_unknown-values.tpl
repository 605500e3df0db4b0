{{/*
Values keys this chart does not know. Upstream's chart has no schema and ignores keys it
does not know, so a values file written for it may carry keys copied from other charts
(controller.extraArgs): they are accepted here too, and named in the rendered output
(templates/values-warnings.yaml) and in NOTES.txt, with the known key a mistyped one is
close to. files/values-keys.json is the tree of known keys (hack/values-schema.py): an
object maps each known key to its tree; a free-form object (tags, resources...) or a
leaf is true, and is not looked into.

efs-csi-driver.unknownValues returns one line per unknown key: "path" or
"path (did you mean known.path?)".
*/}}
{{- define "efs-csi-driver.unknownValues" -}}
{{- $known := .Files.Get "files/values-keys.json" | fromJson -}}
{{- include "efs-csi-driver.unknownUnder" (dict "values" .Values "known" $known "path" "") -}}
{{- end -}}

{{- define "efs-csi-driver.unknownUnder" -}}
{{- $known := .known -}}
{{- $prefix := ternary "" (printf "%s." .path) (eq .path "") -}}
{{- range $k, $v := .values }}
{{- if not (hasKey $known $k) }}
{{- $near := include "efs-csi-driver.nearKey" (dict "key" $k "known" (keys $known | sortAlpha)) }}
{{ $prefix }}{{ $k }}{{ with $near }} (did you mean {{ $prefix }}{{ . }}?){{ end }}
{{- else if and (kindIs "map" (get $known $k)) (kindIs "map" $v) }}
{{- include "efs-csi-driver.unknownUnder" (dict "values" $v "known" (get $known $k) "path" (printf "%s%s" $prefix $k)) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
efs-csi-driver.nearKey is the first of .known that .key looks like a mistyping of: the
same but for case, "-" and "_", or one letter added, dropped, changed or two swapped.
*/}}
{{- define "efs-csi-driver.nearKey" -}}
{{- $key := .key -}}
{{- $norm := lower $key | replace "-" "" | replace "_" "" -}}
{{- $found := "" -}}
{{- range $cand := .known }}
{{- if not $found }}
{{- if eq $norm (lower $cand | replace "-" "" | replace "_" "") }}
{{- $found = $cand }}
{{- else if eq (include "efs-csi-driver.oneEdit" (dict "a" (lower $key) "b" (lower $cand))) "true" }}
{{- $found = $cand }}
{{- end }}
{{- end }}
{{- end -}}
{{- $found -}}
{{- end -}}

{{/* "true" when a and b differ by one inserted, deleted or changed letter, or two adjacent letters swapped. */}}
{{- define "efs-csi-driver.oneEdit" -}}
{{- $a := .a -}}{{- $b := .b -}}
{{- $la := len $a -}}{{- $lb := len $b -}}
{{- $ok := false -}}
{{- if eq $la $lb -}}
  {{- $diff := list -}}
  {{- range $i := until $la -}}
    {{- if ne (substr $i (add1 $i | int) $a) (substr $i (add1 $i | int) $b) -}}{{- $diff = append $diff $i -}}{{- end -}}
  {{- end -}}
  {{- if eq (len $diff) 1 -}}{{- $ok = true -}}
  {{- else if eq (len $diff) 2 -}}
    {{- $i := index $diff 0 -}}{{- $j := index $diff 1 -}}
    {{- if and (eq $j (add1 $i | int)) (eq (substr $i $j $a) (substr $j (add1 $j | int) $b)) (eq (substr $j (add1 $j | int) $a) (substr $i $j $b)) -}}{{- $ok = true -}}{{- end -}}
  {{- end -}}
{{- else if or (eq $la (add1 $lb | int)) (eq $lb (add1 $la | int)) -}}
  {{- $long := ternary $a $b (gt $la $lb) -}}{{- $short := ternary $b $a (gt $la $lb) -}}
  {{- range $i := until (len $long) -}}
    {{- if eq (printf "%s%s" (substr 0 $i $long) (substr (add1 $i | int) (len $long) $long)) $short -}}{{- $ok = true -}}{{- end -}}
  {{- end -}}
{{- end -}}
{{- $ok -}}
{{- end -}}
