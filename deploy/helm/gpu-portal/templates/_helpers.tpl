{{/* Names: the release's objects are "<release>-gpu-portal" unless the release is already called that. */}}
{{- define "gpu-portal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpu-portal
{{- end -}}

{{/* Selector labels of one component: web, worker, beat, watcher, migrate. */}}
{{- define "gpu-portal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-portal.serviceAccount" -}}{{ include "gpu-portal.fullname" . }}{{- end -}}
{{- define "gpu-portal.beatServiceAccount" -}}{{ include "gpu-portal.fullname" . }}-beat{{- end -}}
{{- define "gpu-portal.memberRole" -}}{{ include "gpu-portal.fullname" . }}-member{{- end -}}
{{- define "gpu-portal.teamNamespaceRole" -}}{{ include "gpu-portal.fullname" . }}-in-team-namespaces{{- end -}}
{{- define "gpu-portal.watcherLease" -}}{{ .Release.Name }}-watcher{{- end -}}
{{- define "gpu-portal.beatLease" -}}{{ .Release.Name }}-beat{{- end -}}

{{- define "gpu-portal.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The host of siteUrl ("https://gpu.example.com/x" -> "gpu.example.com"). */}}
{{- define "gpu-portal.siteHost" -}}
{{- (urlParse .Values.siteUrl).host | splitList ":" | first -}}
{{- end -}}

{{- define "gpu-portal.serviceHost" -}}
{{ include "gpu-portal.fullname" . }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{- /* The portal's Service as workload HTTPRoutes' ExternalAuth filter names it, when it does. */ -}}
{{- define "gpu-portal.gateService" -}}
{{- if and (eq .Values.workloadIngress.routes "gateway") .Values.workloadIngress.gatewayAuthFilter -}}
{{ .Release.Namespace }}/{{ include "gpu-portal.fullname" . }}:80
{{- end -}}
{{- end -}}

{{- define "gpu-portal.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret.existingSecret | quote }}
      key: {{ .secret.key | quote }}
{{- end -}}

{{- define "gpu-portal.plainEnv" -}}
{{- range $name, $value := . }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The environment of every container: portal/settings.py reads it all. Secrets come from
existing Secrets only, so the migration hook, which runs before any object of the release
exists, can read them too. */}}
{{- define "gpu-portal.env" -}}
{{- $v := .Values -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{ include "gpu-portal.secretEnv" (dict "name" "SECRET_KEY" "secret" $v.secretKey) }}
{{ include "gpu-portal.secretEnv" (dict "name" "DATABASE_URL" "secret" $v.database) }}
{{ include "gpu-portal.secretEnv" (dict "name" "REDIS_URL" "secret" $v.redis) }}
{{- if $v.metrics.existingSecret }}
{{ include "gpu-portal.secretEnv" (dict "name" "METRICS_TOKEN" "secret" $v.metrics) }}
{{- end }}
{{- if $v.oidc.enabled }}
{{ include "gpu-portal.secretEnv" (dict "name" "OIDC_RP_CLIENT_SECRET" "secret" $v.oidc.clientSecret) }}
{{- end }}
{{- if $v.telemetry.token.existingSecret }}
{{ include "gpu-portal.secretEnv" (dict "name" "PROMETHEUS_TOKEN" "secret" $v.telemetry.token) }}
{{- end }}
{{- $hosts := concat (list (include "gpu-portal.siteHost" .) (include "gpu-portal.fullname" .) (include "gpu-portal.serviceHost" .)) $v.allowedHosts }}
{{- $site := urlParse $v.siteUrl }}
{{- $env := dict
  "PORTAL_PRODUCTION" "1"
  "SITE_URL" $v.siteUrl
  "ALLOWED_HOSTS" (printf "%s,$(POD_IP)" (join "," (uniq $hosts)))
  "CSRF_TRUSTED_ORIGINS" (join "," (uniq (concat (list (printf "%s://%s" $site.scheme $site.host)) $v.csrfTrustedOrigins)))
  "PORTAL_VAR_DIR" "/tmp/gpu-portal"
  "TIME_ZONE" $v.timeZone
  "BILLING_TIME_ZONE" $v.billingTimeZone
  "PORTAL_EMISSION_FACTOR_KG_PER_KWH" $v.emissionFactorKgPerKwh
  "LOG_LEVEL" $v.logLevel
  "LOG_FORMAT" "json"
  "PORTAL_PROXY_HOPS" $v.proxyHops
  "PORTAL_READINESS_CHECKS" (join "," $v.web.readinessChecks)
  "PORTAL_CLUSTER" "kubernetes"
  "KUBE_IN_CLUSTER" "1"
  "PORTAL_NAMESPACE" .Release.Namespace
  "PORTAL_POD_LABELS" (include "gpu-portal.labelList" (include "gpu-portal.teamReachLabels" . | fromYaml))
  "PORTAL_MEMBER_CLUSTER_ROLE" (include "gpu-portal.memberRole" .)
  "PORTAL_QUEUE_BACKEND" $v.cluster.queueBackend
  "PORTAL_COHORT" $v.cluster.cohort
  "PORTAL_NAMESPACE_PREFIX" $v.cluster.namespacePrefix
  "PORTAL_TEAM_MAX_WORKLOADS" $v.cluster.teamMaxWorkloads
  "PORTAL_IMAGE_REGISTRIES" (join "," $v.cluster.imageRegistries)
  "PORTAL_GIT_SOURCES" (join "," $v.cluster.gitSources)
  "PORTAL_GIT_IMAGE" $v.cluster.gitImage
  "PORTAL_INGRESS_NAMESPACE" $v.cluster.ingressNamespace
  "PORTAL_INGRESS_CLASS" $v.workloadIngress.className
  "PORTAL_INGRESS_DOMAIN" $v.workloadIngress.domain
  "PORTAL_INGRESS_TLS_SECRET" $v.workloadIngress.tlsSecret
  "PORTAL_INGRESS_CLUSTER_ISSUER" $v.workloadIngress.clusterIssuer
  "PORTAL_INGRESS_AUTH_URL" ($v.workloadIngress.authUrl | default (printf "http://%s" (include "gpu-portal.serviceHost" .)))
  "PORTAL_ENDPOINT_ROUTES" $v.workloadIngress.routes
  "PORTAL_GATEWAY" $v.workloadIngress.gateway
  "PORTAL_GATEWAY_AUTH_SERVICE" (include "gpu-portal.gateService" .)
  "PORTAL_GATEWAY_TLS" (ternary "1" "0" $v.workloadIngress.gatewayTls)
  "PORTAL_DNS_NAMESPACE" $v.cluster.dns.namespace
  "PORTAL_DNS_POD_LABELS" (include "gpu-portal.labelList" $v.cluster.dns.podLabels)
  "PORTAL_DEVICE_PLUGIN_POD_LABELS" (include "gpu-portal.labelList" $v.cluster.gpuStack.devicePluginPodLabels)
  "PORTAL_GPU_EXPORTER_POD_LABELS" (include "gpu-portal.labelList" $v.cluster.gpuStack.exporterPodLabels)
  "PORTAL_EGRESS_INTERNET" (ternary "on" "off" $v.cluster.egress.internet)
  "PORTAL_EGRESS_EXCLUDE_PRIVATE" (ternary "1" "0" $v.cluster.egress.excludePrivate)
  "PORTAL_EGRESS_ALLOW_CIDRS" (join "," $v.cluster.egress.allowCidrs)
  "PORTAL_EGRESS_ALLOW_NAMESPACES" (join "," $v.cluster.egress.allowNamespaces)
  "KUBE_OIDC_USERNAME_CLAIM" $v.oidc.kubeUsernameClaim
  "KUBE_OIDC_USERNAME_PREFIX" ($v.oidc.kubeUsernamePrefix | default "-")
  "KUBE_OIDC_ISSUER" $v.oidc.kubeIssuer
}}
{{- if $v.email.host }}
{{- $_ := set $env "EMAIL_BACKEND" "django.core.mail.backends.smtp.EmailBackend" }}
{{- $_ := set $env "EMAIL_HOST" $v.email.host }}
{{- $_ := set $env "EMAIL_PORT" $v.email.port }}
{{- end }}
{{- $_ := set $env "DEFAULT_FROM_EMAIL" $v.email.from }}
{{- if $v.telemetry.prometheusUrl }}
{{- $_ := set $env "PROMETHEUS_URL" $v.telemetry.prometheusUrl }}
{{- end }}
{{- if $v.oidc.enabled }}
{{- $_ := set $env "OIDC_RP_CLIENT_ID" $v.oidc.clientId }}
{{- $_ := set $env "OIDC_OP_ISSUER" $v.oidc.issuer }}
{{- $_ := set $env "OIDC_OP_AUTHORIZATION_ENDPOINT" $v.oidc.authorizationEndpoint }}
{{- $_ := set $env "OIDC_OP_TOKEN_ENDPOINT" $v.oidc.tokenEndpoint }}
{{- $_ := set $env "OIDC_OP_USER_ENDPOINT" $v.oidc.userEndpoint }}
{{- $_ := set $env "OIDC_OP_JWKS_ENDPOINT" $v.oidc.jwksEndpoint }}
{{- $_ := set $env "OIDC_RP_SCOPES" $v.oidc.scopes }}
{{- $_ := set $env "OIDC_GROUPS_CLAIM" $v.oidc.groupsClaim }}
{{- $_ := set $env "OIDC_ADMIN_GROUPS" (join "," $v.oidc.adminGroups) }}
{{- $_ := set $env "OIDC_FINANCE_GROUPS" (join "," $v.oidc.financeGroups) }}
{{- $_ := set $env "OIDC_TEAM_GROUP_PREFIX" $v.oidc.teamGroupPrefix }}
{{- $_ := set $env "OIDC_TEAM_LEAD_SUFFIX" $v.oidc.teamLeadSuffix }}
{{- end }}
{{- if $v.rbac.namespacedReads }}
{{- $_ := set $env "PORTAL_NAMESPACED_READS" "1" }}
{{- $_ := set $env "PORTAL_TEAM_NAMESPACE_ROLE" (include "gpu-portal.teamNamespaceRole" .) }}
{{- $_ := set $env "PORTAL_SERVICE_ACCOUNT" (include "gpu-portal.serviceAccount" .) }}
{{- end }}
{{- range $name, $value := $v.settings }}
{{- $_ := set $env $name $value }}
{{- end }}
{{- include "gpu-portal.plainEnv" $env }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* "key=value,key=value" from a map, sorted. */}}
{{- define "gpu-portal.labelList" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The pods team NetworkPolicies let reach team servers' HTTP port: the worker's (how idle a
notebook or workspace is) and the web pods' (an inference server page's Try it questions), only. */}}
{{- define "gpu-portal.teamReachLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
gpu-portal.io/reaches-team-servers: "true"
{{- end -}}

{{- define "gpu-portal.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpu-portal.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* What every pod of the chart shares: placement, security, image pull secrets, /tmp. */}}
{{- define "gpu-portal.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "gpu-portal.podSecurityContext" .root | nindent 2 }}
{{- with (.values.nodeSelector | default .root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.tolerations | default .root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.affinity | default .root.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: {{ .root.Values.tmpSizeLimit }}
{{- end -}}

{{- define "gpu-portal.containerCommon" -}}
image: {{ include "gpu-portal.image" .root | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- include "gpu-portal.containerSecurityContext" .root | nindent 2 }}
resources:
  {{- toYaml .values.resources | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
env:
  {{- include "gpu-portal.env" .root | nindent 2 }}
{{- end -}}

{{/* A pre-install, pre-upgrade hook Job running one manage.py command, in hook-weight order, with
the migrate values (resources, placement, deadline) and no ServiceAccount token. Takes root,
component, weight, command (a list) and env (a map, optional) added to the common environment. */}}
{{- define "gpu-portal.hookJob" -}}
{{- $root := .root -}}
{{- $c := dict "root" $root "component" .component "values" $root.Values.migrate -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "gpu-portal.fullname" $root }}-{{ .component }}
  labels:
    {{- include "gpu-portal.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: {{ .weight | quote }}
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: {{ $root.Values.migrate.backoffLimit }}
  activeDeadlineSeconds: {{ $root.Values.migrate.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- include "gpu-portal.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      {{- include "gpu-portal.podCommon" $c | nindent 6 }}
      containers:
        - name: {{ .component }}
          command: {{ toJson .command }}
          {{- include "gpu-portal.containerCommon" $c | nindent 10 }}
          {{- with .env }}
          {{- include "gpu-portal.plainEnv" . | trim | nindent 12 }}
          {{- end }}
{{- end -}}
