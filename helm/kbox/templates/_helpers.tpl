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
     never as 1e+06. An enum value is passed as (dict "enum" "NAME") and prints unquoted. */}}
{{- define "kbox.textprotoField" -}}
{{- $name := index . 0 }}
{{- $values := index . 1 }}
{{- if not (kindIs "slice" $values) }}{{ $values = list $values }}{{ end }}
{{- range $values }}
{{- if kindIs "map" . }}
{{ $name }}: {{ .enum }}
{{- else if kindIs "string" . }}
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

{{/* Compile stages at once when values.config.scheduling names none: the pod's CPU request in
whole cores, at least 1. kboxd's own default counts the cores it sees, which in a container are
the node's. */}}
{{- define "kbox.compileWorkers" -}}
{{- $cpu := toString (dig "requests" "cpu" "1" (.Values.resources | default dict)) -}}
{{- if hasSuffix "m" $cpu -}}
{{- max 1 (div (atoi (trimSuffix "m" $cpu)) 1000) -}}
{{- else -}}
{{- max 1 (int64 (floor (float64 $cpu))) -}}
{{- end -}}
{{- end }}

{{/* DaemonConfig's sections, in config.proto's order; values.config is keyed by them. */}}
{{- define "kbox.configSections" -}}listener auth limits sandbox scheduling caches store experimental{{- end }}

{{/* A whole config file: (list $ owned) where owned maps each section to the chart's own fields
of it. Each section is rendered once, `name {` ... `}`, the chart's fields first, then
values.config's (a field the chart sets is not taken from values.config); a section with no
field is left out. */}}
{{- define "kbox.configSectionsText" -}}
{{- $root := index . 0 }}
{{- $owned := index . 1 }}
{{- range $section := splitList " " (include "kbox.configSections" $root) }}
{{- $chart := get $owned $section | default dict }}
{{- $values := get ($root.Values.config | default dict) $section | default dict }}
{{- $body := "" }}
{{- range $name, $value := $chart }}
{{- $body = print $body (include "kbox.textprotoField" (list $name $value)) }}
{{- end }}
{{- range $name, $value := $values }}
{{- if not (hasKey $chart $name) }}
{{- $body = print $body (include "kbox.textprotoField" (list $name $value)) }}
{{- end }}
{{- end }}
{{- if $body }}
{{ $section }} {
{{- $body | trimPrefix "\n" | nindent 2 }}
}
{{- end }}
{{- end }}
{{- end }}

{{/* kboxd's config file (kbox.v1.DaemonConfig, text format). */}}
{{- define "kbox.configText" -}}
{{- $scheduling := dict }}
{{- if not (dig "scheduling" "compile_workers" 0 (.Values.config | default dict)) }}
{{- $_ := set $scheduling "compile_workers" (int64 (include "kbox.compileWorkers" .)) }}
{{- end }}
{{- if .Values.compileTier.enabled }}
{{- $_ := set $scheduling "role" (dict "enum" "ROLE_RUN") }}
{{- $_ := set $scheduling "compile_endpoint" (include "kbox.compile.endpoint" .) }}
{{- end }}
{{- $store := dict "work_dir" (include "kbox.paths.workDir" .) }}
{{- if .Values.jobStore.enabled }}
{{- $_ := set $store "job_store_dir" (include "kbox.paths.jobStoreDir" .) }}
{{- end }}
{{- $auth := dict }}
{{- if .Values.auth.enabled }}
{{- $_ := set $auth "api_tokens_file" (include "kbox.paths.tokensFile" .) }}
{{- if .Values.auth.requiredForMetrics }}
{{- $_ := set $auth "auth_required_for_metrics" true }}
{{- end }}
{{- end }}
{{- $owned := dict
  "listener" (dict "listen" (printf "0.0.0.0:%d" (int64 .Values.containerPort)))
  "auth" $auth
  "scheduling" $scheduling
  "caches" (dict "build_cache_dir" (include "kbox.paths.buildCacheDir" .))
  "store" $store -}}
# kbox.v1.DaemonConfig (proto/kbox/v1/config.proto), rendered by the kbox chart from values.config.
# The chart's own fields, first in their sections: listener.listen, the auth section,
# scheduling.compile_workers (unless values.config.scheduling names it), scheduling.role and
# compile_endpoint (compileTier), caches.build_cache_dir, store.work_dir and store.job_store_dir.
{{- include "kbox.configSectionsText" (list . $owned) }}
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
when networkPolicy.enabled); values.config applies except scheduling.compile_workers. */}}
{{- define "kbox.compile.configText" -}}
{{- $owned := dict
  "listener" (dict "listen" (printf "0.0.0.0:%d" (int64 .Values.containerPort)))
  "scheduling" (dict "role" (dict "enum" "ROLE_COMPILE") "compile_workers" (int64 (include "kbox.compile.workers" .)))
  "caches" (dict "build_cache_dir" (include "kbox.paths.buildCacheDir" .))
  "store" (dict "work_dir" (include "kbox.paths.workDir" .)) -}}
# kbox.v1.DaemonConfig (proto/kbox/v1/config.proto) of a compile-role kboxd, rendered by the kbox
# chart from values.config. The chart's own fields, first in their sections: listener.listen,
# scheduling.role and compile_workers (compileTier), caches.build_cache_dir, store.work_dir.
{{- include "kbox.configSectionsText" (list . $owned) }}
{{ end }}
