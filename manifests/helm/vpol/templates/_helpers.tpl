{{/*
Labels of every object: vpol's name label (the kustomize manifests carry the same) plus Helm's.
Names are fixed (vpol, vpol-operator, vpol-webhook, ...): vpol runs once per cluster, and the
operator and its documentation name these objects.
*/}}
{{- define "vpol.labels" -}}
app.kubernetes.io/name: vpol
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "vpol.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret the webhook serves from, when it is not vpol's own (vpol-webhook-tls). */}}
{{- define "vpol.certSecret" -}}
{{- if and .Values.webhook.certManager.enabled .Values.webhook.certSecret -}}
{{- fail "webhook.certSecret and webhook.certManager.enabled exclude each other: cert-manager writes its own Secret" -}}
{{- end -}}
{{- if .Values.webhook.certManager.enabled -}}
vpol-webhook-cert
{{- else -}}
{{ .Values.webhook.certSecret }}
{{- end -}}
{{- end }}

{{/* The flags of `vpol run`. */}}
{{- define "vpol.args" -}}
- --peering=vpol
- --metrics-port={{ int64 .Values.ports.metrics }}
- --liveness-port={{ int64 .Values.ports.health }}
- --webhook-port={{ int64 .Values.ports.webhook }}
- --owner-clusterrole=vpol-operator
- --workers={{ int64 .Values.operator.workers }}
- --resync={{ .Values.operator.resync }}
- --scan-interval={{ .Values.operator.scanInterval }}
- --eval-timeout={{ .Values.operator.evalTimeout }}
- --eval-memory-limit={{ int64 .Values.operator.evalMemoryLimit }}
- --vap-generation={{ .Values.operator.vapGeneration }}
- --policy-validation={{ ternary "on" "off" .Values.operator.policyValidation }}
- --events={{ ternary "on" "off" .Values.operator.events }}
- --events-per-second={{ .Values.operator.eventsPerSecond }}
- --webhook={{ ternary "on" "off" .Values.webhook.enabled }}
- --webhook-timeout={{ int64 .Values.webhook.timeoutSeconds }}
- --webhook-workers={{ int64 .Values.webhook.workers }}
- --webhook-eval-timeout={{ .Values.webhook.evalTimeout }}
- --webhook-inline={{ ternary "on" "off" .Values.webhook.inline }}
- --webhook-drain={{ .Values.webhook.drainSeconds }}
{{- with .Values.webhook.excludeNamespaces }}
- --webhook-exclude-namespaces
{{- range . }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- with include "vpol.certSecret" . }}
- --webhook-cert-secret={{ . }}
{{- end }}
{{- with .Values.webhook.url }}
- --webhook-url={{ . }}
{{- end }}
{{- with .Values.operator.httpAllow }}
- --http-allow
{{- range . }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- range .Values.operator.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
