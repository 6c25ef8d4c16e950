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

{{/* repository:tag, or repository@digest when a digest is pinned (then the tag is ignored). */}}
{{- define "sie.image" -}}
{{- $img := .image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the API keys (comma-separated, key "api-keys"), or "" when auth is off. */}}
{{- define "sie.apiKeySecret" -}}
{{- if .Values.apiKey.existingSecret -}}
{{- .Values.apiKey.existingSecret -}}
{{- else if .Values.apiKey.value -}}
{{- printf "%s-api-keys" (include "sie.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* API keys reach the servers as a mounted file, not an environment variable: a file is not
in `kubectl describe` / crash dumps of the environment, and the servers re-read it when the kubelet
updates the Secret, so keys rotate without a restart. */}}
{{- define "sie.apiKeyDir" -}}/etc/sie/api-keys{{- end -}}

{{- define "sie.apiKeyArg" -}}
{{- if include "sie.apiKeySecret" . -}}
- --api-key-file={{ include "sie.apiKeyDir" . }}/{{ .Values.apiKey.secretKey }}
{{- end -}}
{{- end -}}

{{- define "sie.apiKeyMount" -}}
{{- if include "sie.apiKeySecret" . -}}
- name: api-keys
  mountPath: {{ include "sie.apiKeyDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "sie.apiKeyVolume" -}}
{{- with include "sie.apiKeySecret" . -}}
- name: api-keys
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end -}}
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

{{/* ---- queue mode ---------------------------------------------------------------------- */}}
{{- define "sie.natsName" -}}
{{- printf "%s-nats" (include "sie.fullname" .) -}}
{{- end -}}

{{/* The chart runs its own NATS when queue mode is on and no external one is named. */}}
{{- define "sie.ownNats" -}}
{{- if and .Values.queue.enabled (not .Values.queue.url) -}}true{{- end -}}
{{- end -}}

{{- define "sie.queueUrl" -}}
{{- .Values.queue.url | default (printf "nats://%s.%s.svc.cluster.local:4222" (include "sie.natsName" .) .Release.Namespace) -}}
{{- end -}}

{{- define "sie.queueMonitoring" -}}
{{- .Values.queue.monitoringEndpoint | default (printf "%s.%s.svc.cluster.local:8222" (include "sie.natsName" .) .Release.Namespace) -}}
{{- end -}}

{{/* ---- runtime model config: the admin key file and the config dir ---------------------- */}}
{{- define "sie.adminKeySecret" -}}
{{- if .Values.admin.existingSecret -}}
{{- .Values.admin.existingSecret -}}
{{- else if .Values.admin.value -}}
{{- printf "%s-admin-keys" (include "sie.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "sie.adminKeyDir" -}}/etc/sie/admin-keys{{- end -}}

{{/* The arguments, mounts and volumes of the admin key file and the config dir (router and engines). */}}
{{- define "sie.adminArgs" -}}
{{- if include "sie.adminKeySecret" . }}
- --admin-key-file={{ include "sie.adminKeyDir" . }}/{{ .Values.admin.secretKey }}
{{- end }}
- --config-dir={{ .Values.admin.configDir.mountPath }}
{{- end -}}

{{- define "sie.adminMounts" -}}
{{- if include "sie.adminKeySecret" . }}
- name: admin-keys
  mountPath: {{ include "sie.adminKeyDir" . }}
  readOnly: true
{{- end }}
- name: config-dir
  mountPath: {{ .Values.admin.configDir.mountPath }}
{{- end -}}

{{- define "sie.adminVolumes" -}}
{{- with include "sie.adminKeySecret" . }}
- name: admin-keys
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
- name: config-dir
  {{- if eq .Values.admin.configDir.type "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "admin.configDir.existingClaim is required when admin.configDir.type is pvc" .Values.admin.configDir.existingClaim }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}
