{{/* The name of every object: the release name, or release-chart when it lacks the chart's. */}}
{{- define "mountkeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The DaemonSet's selector: immutable, so it never changes between versions. */}}
{{- define "mountkeeper.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mountkeeper.labels" -}}
{{ include "mountkeeper.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
{{- end -}}

{{/* The image; a moving tag with IfNotPresent is refused: nodes would keep the image they
     have under it and a new version would never roll out. */}}
{{- define "mountkeeper.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if and (eq $tag "latest") (eq .Values.image.pullPolicy "IfNotPresent") -}}
{{- fail "image.tag latest with image.pullPolicy IfNotPresent: nodes keep the image they have under latest and never get a new version; name a versioned tag (make image tags the git describe version), or set image.pullPolicy Always" -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The agent's config: .Values.config with runtimeClasses built from the class list
     (the keys only the chart reads, name and scheduling, left out). */}}
{{- define "mountkeeper.config" -}}
{{- $classes := dict -}}
{{- range .Values.runtimeClasses -}}
{{- if hasKey $classes .name -}}
{{- fail (printf "runtimeClasses: %q is listed twice; give each class one entry" .name) -}}
{{- end -}}
{{- $_ := set $classes .name (omit . "name" "nodeSelector" "tolerations") -}}
{{- end -}}
{{- $config := deepCopy .Values.config -}}
{{- if $classes -}}
{{- $_ := set $config "runtimeClasses" $classes -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The Secret of the node listener's certificate, "" when the listener is off or serves a
     self-signed one. */}}
{{- define "mountkeeper.metricsTLSSecret" -}}
{{- if .Values.metrics.nodeListener.enabled -}}
{{- .Values.metrics.nodeListener.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* The flags that say which containerd files `runtime configure` and `unconfigure` handle:
     the distribution's (detected on each node with auto), or the paths given. */}}
{{- define "mountkeeper.containerdFlags" -}}
- --distribution={{ .Values.distribution }}
{{- with .Values.containerd.configFile }}
- --config-file={{ . }}
{{- end }}
{{- with .Values.containerd.dropIn }}
- --drop-in={{ . }}
{{- end }}
{{- end -}}

{{/* A checksum of what `runtime configure` writes on a node: the class handlers (the classes
     other than default), the state dir their entries name, the runtime, its files and the
     install dir. On the pod template it makes helm upgrade roll the pods when one of them
     changes (a class added, renamed or removed), so the init container configures the
     runtime again, with the same image; a change that reloads live (a class's mounts, the
     other config keys) leaves it, and the pods, alone. */}}
{{- define "mountkeeper.runtimeConfigChecksum" -}}
{{- $classes := list -}}
{{- range .Values.runtimeClasses -}}
{{- if ne .name "default" -}}
{{- $classes = append $classes .name -}}
{{- end -}}
{{- end -}}
{{- $inputs := dict "classes" (sortAlpha $classes) "stateDir" .Values.config.stateDir "runtime" .Values.runtime "distribution" .Values.distribution "containerd" .Values.containerd "crio" .Values.crio "installDir" .Values.installDir -}}
{{- toJson $inputs | sha256sum -}}
{{- end -}}
