{{/*
Labels Helm adds to every object it renders, for bookkeeping. The objects' own labels (name,
component) are written out in each template, as in config/ (kustomize).
*/}}
{{- define "kubedevice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The image of every container: the repository at the tag, else at the chart's appVersion. */}}
{{- define "kubedevice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The user name a service account authenticates as; the admission policies match on it.
Argument: (list $ "<service account name>").
*/}}
{{- define "kubedevice.serviceAccountUser" -}}
{{- $root := index . 0 -}}
system:serviceaccount:{{ $root.Release.Namespace }}:{{ index . 1 }}
{{- end }}

{{/* The health probes listen on 8081 in both containers; metrics must use another port. */}}
{{- define "kubedevice.healthPort" -}}
{{- if eq (int .Values.metrics.port) 8081 -}}
{{- fail "metrics.port must not be 8081: the health probes of the agent and the controller listen there" -}}
{{- end -}}
8081
{{- end }}

{{/*
The annotations of the post-delete cleanup hook's objects. Argument: (list "<hook weight>"); lower
weights are created first. Deleted before a new run is created, and once the Job succeeded.
*/}}
{{- define "kubedevice.cleanupHook" -}}
helm.sh/hook: post-delete
helm.sh/hook-weight: {{ index . 0 | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
