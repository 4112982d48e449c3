{{- define "avs.name" -}}averaging-swarm{{- end -}}

{{- define "avs.fullname" -}}
{{- if contains "averaging-swarm" .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-averaging-swarm" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "avs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "avs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "avs.labels" -}}
{{ include "avs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "avs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "avs.fullname" .) .Values.serviceAccount.name }}
{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "avs.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{- define "avs.agentImage" -}}{{ .Values.agent.image.repository }}:{{ default .Chart.AppVersion .Values.agent.image.tag }}{{- end -}}
