{{/* Names and labels, as prometheus-node-exporter's chart builds them. */}}

{{- define "kbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>", or the release name alone when it already contains the chart name. */}}
{{- define "kbox.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kbox.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kbox.labels" -}}
helm.sh/chart: {{ include "kbox.chart" . }}
{{ include "kbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: kboxd
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "kbox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kbox.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kbox.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the pod finds things; the ConfigMap points kboxd at the same paths. */}}
{{- define "kbox.paths.configDir" -}}/etc/kbox/config{{- end }}
{{- define "kbox.paths.configFile" -}}/etc/kbox/config/kboxd.textproto{{- end }}
{{- define "kbox.paths.tokensDir" -}}/etc/kbox/tokens{{- end }}
{{- define "kbox.paths.tokensFile" -}}/etc/kbox/tokens/tokens{{- end }}
{{- define "kbox.paths.workDir" -}}/var/lib/kbox/work{{- end }}
{{- define "kbox.paths.buildCacheDir" -}}/var/lib/kbox/build-cache{{- end }}
{{- define "kbox.paths.jobStoreDir" -}}/var/lib/kbox/job-store{{- end }}

{{/* The Secret holding the tokens file (key `tokens`), "" when auth is off. */}}
{{- define "kbox.tokensSecretName" -}}
{{- if .Values.auth.enabled }}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.tokens }}
{{- printf "%s-tokens" (include "kbox.fullname" .) }}
{{- else }}
{{- fail "auth.enabled is true but neither auth.existingSecret nor auth.tokens is set: name a Secret with key `tokens`, list tokens, or set auth.enabled=false to run kboxd without authentication" }}
{{- end }}
{{- end }}
{{- end }}

{{/* One text-format field: `name: value`, one line per element for repeated fields. Numbers
     arrive as float64 (Helm decodes values through JSON): integral ones print as integers,
     never as 1e+06. */}}
{{- define "kbox.textprotoField" -}}
{{- $name := index . 0 }}
{{- $values := index . 1 }}
{{- if not (kindIs "slice" $values) }}{{ $values = list $values }}{{ end }}
{{- range $values }}
{{- if kindIs "string" . }}
{{ $name }}: {{ . | quote }}
{{- else if kindIs "bool" . }}
{{ $name }}: {{ . }}
{{- else if eq (float64 (int64 .)) (float64 .) }}
{{ $name }}: {{ int64 . }}
{{- else }}
{{ $name }}: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Compile stages at once when values.config names none: the pod's CPU request in whole cores,
at least 1. kboxd's own default counts the cores it sees, which in a container are the node's. */}}
{{- define "kbox.compileWorkers" -}}
{{- $cpu := toString (dig "requests" "cpu" "1" (.Values.resources | default dict)) -}}
{{- if hasSuffix "m" $cpu -}}
{{- max 1 (div (atoi (trimSuffix "m" $cpu)) 1000) -}}
{{- else -}}
{{- max 1 (int64 (floor (float64 $cpu))) -}}
{{- end -}}
{{- end }}

{{/* kboxd's config file (kbox.v1.DaemonConfig, text format). */}}
{{- define "kbox.configText" -}}
# kbox.v1.DaemonConfig (proto/kbox/v1/config.proto), rendered by the kbox chart.
# Chart-owned fields:
{{- include "kbox.textprotoField" (list "listen" (printf "0.0.0.0:%d" (int64 .Values.containerPort))) }}
{{- include "kbox.textprotoField" (list "work_dir" (include "kbox.paths.workDir" .)) }}
{{- include "kbox.textprotoField" (list "build_cache_dir" (include "kbox.paths.buildCacheDir" .)) }}
{{- if not .Values.config.compile_workers }}
{{- include "kbox.textprotoField" (list "compile_workers" (int64 (include "kbox.compileWorkers" .))) }}
{{- end }}
{{- if .Values.compileTier.enabled }}
role: ROLE_RUN
{{- include "kbox.textprotoField" (list "compile_endpoint" (include "kbox.compile.endpoint" .)) }}
{{- end }}
{{- if .Values.jobStore.enabled }}
{{- include "kbox.textprotoField" (list "job_store_dir" (include "kbox.paths.jobStoreDir" .)) }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- include "kbox.textprotoField" (list "api_tokens_file" (include "kbox.paths.tokensFile" .)) }}
{{- if .Values.auth.requiredForMetrics }}
{{- include "kbox.textprotoField" (list "auth_required_for_metrics" true) }}
{{- end }}
{{- end }}
# From values.config:
{{- range $name, $value := .Values.config }}
{{- include "kbox.textprotoField" (list $name $value) }}
{{- end }}
{{ end }}

{{/* The compile tier's pods (docs/compile-tier.md): a name of their own, so that no selector of
the GPU pods' (workload, Services, PodDisruptionBudget, NetworkPolicy) ever matches them. */}}
{{- define "kbox.compile.fullname" -}}
{{- printf "%s-compile" (include "kbox.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "kbox.compile.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-compile" (include "kbox.name" . | trunc 55 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kbox.compile.labels" -}}
helm.sh/chart: {{ include "kbox.chart" . }}
{{ include "kbox.compile.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: compile
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Where the GPU pods send their builds: the compile Service. */}}
{{- define "kbox.compile.endpoint" -}}
{{- printf "http://%s.%s.svc:%d" (include "kbox.compile.fullname" .) .Release.Namespace (int64 .Values.service.port) }}
{{- end }}

{{/* Compile stages at once on a compile pod: compileTier.compileWorkers, else its CPU request. */}}
{{- define "kbox.compile.workers" -}}
{{- if .Values.compileTier.compileWorkers -}}
{{- int64 .Values.compileTier.compileWorkers -}}
{{- else -}}
{{- include "kbox.compileWorkers" (dict "Values" (dict "resources" .Values.compileTier.resources)) -}}
{{- end -}}
{{- end }}

{{/* A compile pod's config: role compile, its own workers, no tokens (only the GPU pods reach it
when networkPolicy.enabled); values.config applies except compile_workers. */}}
{{- define "kbox.compile.configText" -}}
# kbox.v1.DaemonConfig (proto/kbox/v1/config.proto) of a compile-role kboxd, rendered by the kbox chart.
# Chart-owned fields:
role: ROLE_COMPILE
{{- include "kbox.textprotoField" (list "listen" (printf "0.0.0.0:%d" (int64 .Values.containerPort))) }}
{{- include "kbox.textprotoField" (list "work_dir" (include "kbox.paths.workDir" .)) }}
{{- include "kbox.textprotoField" (list "build_cache_dir" (include "kbox.paths.buildCacheDir" .)) }}
{{- include "kbox.textprotoField" (list "compile_workers" (int64 (include "kbox.compile.workers" .))) }}
# From values.config:
{{- range $name, $value := .Values.config }}
{{- if ne $name "compile_workers" }}
{{- include "kbox.textprotoField" (list $name $value) }}
{{- end }}
{{- end }}
{{ end }}
