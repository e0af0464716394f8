{{/* The prefix of every object's name: the operator's flag defaults assume "fluent-pvc-operator". */}}
{{- define "fpvc.fullname" -}}
{{- default "fluent-pvc-operator" .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "fpvc.labels" -}}
app.kubernetes.io/name: fluent-pvc-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fpvc.selectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fpvc.serviceAccountName" -}}{{ include "fpvc.fullname" . }}-controller-manager{{- end -}}
{{- define "fpvc.webhookService" -}}{{ include "fpvc.fullname" . }}-webhook-service{{- end -}}
{{- define "fpvc.certSecret" -}}{{ include "fpvc.fullname" . }}-webhook-server-cert{{- end -}}
{{- define "fpvc.mutatingConfig" -}}{{ include "fpvc.fullname" . }}-mutating-webhook-configuration{{- end -}}
{{- define "fpvc.validatingConfig" -}}{{ include "fpvc.fullname" . }}-validating-webhook-configuration{{- end -}}

{{/* The rules of a role in files/role.yaml (made by `make manifests` from the operator's RBAC markers), by kind. */}}
{{- define "fpvc.rules" -}}
{{- $kind := .kind -}}
{{- range (.root.Files.Get "files/role.yaml" | splitList "\n---\n") -}}
{{- $doc := fromYaml . -}}
{{- if eq (get $doc "kind") $kind -}}
{{ toYaml (get $doc "rules") }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* cert-manager's annotation that injects the CA into a webhook configuration. */}}
{{- define "fpvc.certManagerAnnotation" -}}
{{- if eq .Values.certManagement.mode "cert-manager" }}
  annotations:
    cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "fpvc.fullname" . }}-serving-cert
{{- end }}
{{- end -}}
