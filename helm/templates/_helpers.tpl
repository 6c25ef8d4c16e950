{{/* Names are "<release>-sie-..." unless the release name already says "sie". */}}
{{- define "sie.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "sie" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sie" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sie.labels" -}}
app.kubernetes.io/name: sie
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sie.selectorLabels" -}}
app.kubernetes.io/name: sie
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Engine objects of one pool: call with (dict "root" $ "pool" $pool). */}}
{{- define "sie.engineName" -}}
{{- printf "%s-engine-%s" (include "sie.fullname" .root) .pool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sie.routerName" -}}
{{- printf "%s-router" (include "sie.fullname" .) -}}
{{- end -}}

{{- define "sie.image" -}}
{{- $img := .image -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The Secret holding the API keys (comma-separated, key "api-keys"), or "" when auth is off. */}}
{{- define "sie.apiKeySecret" -}}
{{- if .Values.apiKey.existingSecret -}}
{{- .Values.apiKey.existingSecret -}}
{{- else if .Values.apiKey.value -}}
{{- printf "%s-api-keys" (include "sie.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "sie.apiKeyEnv" -}}
{{- $secret := include "sie.apiKeySecret" . -}}
{{- if $secret -}}
- name: SIE_API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.apiKey.secretKey }}
{{- end }}
{{- end -}}

{{/* KEDA owns the replica count of a pool when autoscaling is on for it. */}}
{{- define "sie.kedaOwns" -}}
{{- $as := include "sie.poolAutoscaling" . | fromYaml -}}
{{- if $as.enabled -}}true{{- end -}}
{{- end -}}

{{- define "sie.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "sie.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A pool's autoscaling settings: the pool's own keys over the chart-wide defaults. */}}
{{/* A shallow override with `set`, not mergeOverwrite: mergeOverwrite skips a pool's zero
values, so `minReplicas: 0` or `enabled: false` would silently keep the defaults. */}}
{{- define "sie.poolAutoscaling" -}}
{{- $merged := deepCopy .root.Values.autoscaling -}}
{{- range $key, $value := (.pool.autoscaling | default dict) -}}
{{- $_ := set $merged $key $value -}}
{{- end -}}
{{- toYaml $merged -}}
{{- end -}}
