"""Every setting the environment gives the portal, declared once: its name, type, default, effect
and whether production requires it.

`portal/settings.py` reads the environment only through the readers below, and a reader refuses a
name this declaration lacks, so no setting can be read without being declared. The configuration
reference (docs/configuration.md) is written from the declaration by `manage.py
settings_reference`, and a test compares the committed page with what it writes, so the page
cannot drift from the code either.

Nothing here imports Django settings: the readers run while the settings module is being built.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Literal

from django.core.exceptions import ImproperlyConfigured

Type = Literal["text", "secret", "URL", "path", "yes/no", "whole number", "number", "list", "labels", "rate",
               "JSON object", "namespace"]

# How each type is written in the environment, for the reference page.
TYPES: dict[Type, str] = {
    "text": "as written; empty means the default",
    "secret": "as written; keep it in a Kubernetes Secret, never in values or images",
    "URL": "an address, as written; a trailing slash is dropped where noted",
    "path": "a file or folder on the portal's file system",
    "yes/no": "`1`, `true`, `yes` or `on` (any case) for yes; anything else, empty included, for no",
    "whole number": "ASCII digits",
    "number": "a decimal number such as `2` or `0.5`",
    "list": "comma-separated; spaces around items are dropped; set but empty means an empty list",
    "labels": "Kubernetes labels written `key=value,key=value`; set but empty means none",
    "rate": "a count per second, minute, hour or day, such as `30/minute`",
    "JSON object": "a JSON object of strings",
    "namespace": "a Kubernetes namespace name",
}

# A default worked out when the portal starts rather than written here: the declaration says how
# in words (`Setting.default_text`) and the settings module passes the value to the reader.
COMPUTED: None = None


@dataclass(frozen=True)
class Setting:
    name: str
    type: Type
    default: str | None  # as written in the environment; COMPUTED: see default_text
    effect: str  # one sentence
    group: str
    production: bool = False  # with PORTAL_PRODUCTION on, a missing value stops the start with its name
    default_text: str = ""  # how a COMPUTED default is worked out


@dataclass(frozen=True)
class Retired:
    name: str
    instead: str
    why: str


SITE = "Site"
STORAGE = "Database, broker and cache"
SECURITY = "HTTPS, headers and /metrics"
SIGN_IN = "Sessions, sign-in and API tokens"
SSO = "Single sign-on (OpenID Connect)"
CLUSTER = "The cluster"
LEADER = "Leader election"
NETWORK = "Team network policies"
ENDPOINTS = "Workload endpoints"
WORKLOADS = "Workloads, templates and quota"
HEALTH = "Health and readiness"
TELEMETRY = "GPU telemetry"
BILLING = "Billing"
EMAIL = "Email"
LOGGING = "Logging"
GROUPS = (SITE, STORAGE, SECURITY, SIGN_IN, SSO, CLUSTER, LEADER, NETWORK, ENDPOINTS, WORKLOADS, HEALTH, TELEMETRY,
          BILLING, EMAIL, LOGGING)

_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "base-uri 'self'; form-action 'self'; object-src 'none'")
_PERMISSIONS = ("accelerometer=(), autoplay=(), camera=(), display-capture=(), encrypted-media=(), fullscreen=(), "
                "geolocation=(), gyroscope=(), hid=(), idle-detection=(), magnetometer=(), microphone=(), midi=(), "
                "payment=(), picture-in-picture=(), publickey-credentials-get=(), screen-wake-lock=(), serial=(), usb=(), "
                "xr-spatial-tracking=()")

SETTINGS: tuple[Setting, ...] = (
    # --- Site
    Setting("PORTAL_PRODUCTION", "text", "", "`1`, `true` or `yes` turns production on: the settings marked required "
            "must be given, HTTPS is enforced, static files are compressed and logs are JSON.", SITE),
    Setting("SECRET_KEY", "secret", "dev-only-insecure-key-do-not-use-in-production", "Django's signing key for "
            "sessions, CSRF tokens and the notebook hand-over tickets.", SITE, production=True),
    Setting("DEBUG", "yes/no", COMPUTED, "Django's debug pages instead of the portal's own error pages; never in "
            "production.", SITE, default_text="no in production, yes otherwise (`make demo` sets it to no)"),
    Setting("ALLOWED_HOSTS", "list", COMPUTED, "The host names the portal answers to; include the host of "
            "`PORTAL_INGRESS_AUTH_URL`.", SITE, production=True,
            default_text="empty in production, else `localhost,127.0.0.1,[::1],testserver`"),
    Setting("CSRF_TRUSTED_ORIGINS", "list", "", "Origins (`https://portal.example.com`) trusted for form posts besides the site "
            "itself.", SITE),
    Setting("SITE_URL", "URL", "http://127.0.0.1:8000", "The portal's address as people reach it, used in emails and "
            "links (trailing slash dropped).", SITE, production=True),
    Setting("TIME_ZONE", "text", "UTC", "The site's time zone: pages show times in it, a quota grant ends at the "
            "midnight after its last day in it, and Celery's schedule runs in it.", SITE),
    Setting("PORTAL_APP_DIR", "path", COMPUTED, "Where templates/, static/ and the collected static files live; the "
            "image sets `/app`.", SITE, default_text="the checkout (the folder above `portal/`)"),
    Setting("PORTAL_VAR_DIR", "path", COMPUTED, "Where the embedded setup keeps its SQLite database and file-system "
            "broker; the only folder the portal writes besides /tmp.", SITE, default_text="`var/` in `PORTAL_APP_DIR`"),
    Setting("STATIC_ROOT", "path", COMPUTED, "Where `collectstatic` puts the static files WhiteNoise serves.", SITE,
            default_text="`staticfiles/` in `PORTAL_APP_DIR`"),
    # --- Database, broker and cache
    Setting("DATABASE_URL", "secret", "", "The PostgreSQL database, `postgres://USER:PASSWORD@HOST:5432/NAME`; empty "
            "means an SQLite file in `PORTAL_VAR_DIR`.", STORAGE, production=True),
    Setting("PORTAL_DATABASE_CONNECT_TIMEOUT", "whole number", "5", "Seconds opening a PostgreSQL connection may take, "
            "so an address that drops packets fails a readiness probe instead of holding it.", STORAGE),
    Setting("REDIS_URL", "secret", "", "Redis for Celery's broker and the shared cache (sign-in and launch counters); "
            "empty means a file-system broker and a per-process cache.", STORAGE, production=True),
    Setting("CELERY_VISIBILITY_TIMEOUT_SECONDS", "whole number", "3600", "Seconds after which a task taken by a "
            "worker that died goes to a worker again; keep it above the longest retry countdown (120 s).", STORAGE),
    Setting("CELERY_UNACKED_RESTORE_SECONDS", "whole number", "", "How often a running worker looks for such tasks; "
            "empty keeps kombu's 100 s.", STORAGE),
    Setting("CELERY_TASK_DEFAULT_QUEUE", "text", "celery", "The queue tasks go to and workers take from: one per site "
            "sharing a Redis.", STORAGE),
    Setting("CELERY_TASK_ALWAYS_EAGER", "yes/no", "false", "Run tasks inside the request instead of on a worker "
            "(benchmarks and tests only).", STORAGE),
    # --- HTTPS, headers and /metrics
    Setting("SECURE_SSL_REDIRECT", "yes/no", "true", "In production, redirect plain HTTP to HTTPS (the probes, "
            "/metrics and the workload gate excepted).", SECURITY),
    Setting("SECURE_HSTS_SECONDS", "whole number", "31536000", "In production, how long browsers must keep to HTTPS "
            "(Strict-Transport-Security, with subdomains and preload).", SECURITY),
    Setting("METRICS_TOKEN", "secret", "", "The bearer token `/metrics` asks for; without one it is open in the "
            "embedded setup and refused to everyone in production.", SECURITY),
    Setting("CONTENT_SECURITY_POLICY", "text", _CSP, "The Content-Security-Policy every page carries; set but empty "
            "sends none.", SECURITY),
    Setting("CONTENT_SECURITY_POLICY_REPORT_ONLY", "yes/no", "false", "Send the policy as report-only, to try a "
            "change.", SECURITY),
    Setting("PERMISSIONS_POLICY", "text", _PERMISSIONS, "The Permissions-Policy every answer carries, refusing browser "
            "features no page uses; set but empty sends none.", SECURITY),
    # --- Sessions, sign-in and API tokens
    Setting("SESSION_IDLE_SECONDS", "whole number", str(8 * 60 * 60), "A session ends after this long without a "
            "request.", SIGN_IN),
    Setting("SESSION_REFRESH_SECONDS", "whole number", "60", "A session in use is saved at most this often to move its "
            "end forward, not on every poll.", SIGN_IN),
    Setting("SESSION_ABSOLUTE_SECONDS", "whole number", str(12 * 60 * 60), "A session ends this long after its sign-in "
            "whatever its use (at least 60).", SIGN_IN),
    Setting("API_TOKEN_MAX_DAYS", "whole number", "365", "The longest an API token may be valid.", SIGN_IN),
    Setting("PORTAL_LOGIN_FAILURES_BEFORE_WAIT", "whole number", "5", "Failed sign-ins of one account name from one "
            "address before it must wait.", SIGN_IN),
    Setting("PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT", "whole number", "20", "Failed sign-ins from one address "
            "across account names before it must wait.", SIGN_IN),
    Setting("PORTAL_LOGIN_BACKOFF_SECONDS", "whole number", "30", "The first wait after those failures, doubled after "
            "each further one.", SIGN_IN),
    Setting("PORTAL_LOGIN_BACKOFF_MAX_SECONDS", "whole number", "900", "The longest wait between sign-in attempts.",
            SIGN_IN),
    Setting("PORTAL_LOGIN_ACCOUNT_CEILING", "whole number", "100", "Failures of one account name across addresses past "
            "which every failing address waits from its first failure (an address that has not failed still gets in).",
            SIGN_IN),
    Setting("PORTAL_LOGIN_FAILURE_WINDOW_SECONDS", "whole number", "3600", "How long failures are counted before the "
            "counts start again.", SIGN_IN),
    Setting("PORTAL_PROXY_HOPS", "whole number", "0", "How many proxies in front of the portal append to "
            "X-Forwarded-For (1 behind one ingress); 0 takes the connection's own address.", SIGN_IN),
    # --- Single sign-on
    Setting("OIDC_RP_CLIENT_ID", "text", "", "The portal's client id at the OpenID Connect provider; setting it turns "
            "single sign-on on.", SSO),
    Setting("OIDC_RP_CLIENT_SECRET", "secret", "", "The client's secret.", SSO),
    Setting("OIDC_RP_SIGN_ALGO", "text", "RS256", "The algorithm the provider signs ID tokens with.", SSO),
    Setting("OIDC_RP_SCOPES", "text", "openid email profile groups", "The scopes the portal asks for.", SSO),
    Setting("OIDC_OP_AUTHORIZATION_ENDPOINT", "URL", "", "The provider's authorization endpoint.", SSO),
    Setting("OIDC_OP_TOKEN_ENDPOINT", "URL", "", "The provider's token endpoint.", SSO),
    Setting("OIDC_OP_USER_ENDPOINT", "URL", "", "The provider's userinfo endpoint.", SSO),
    Setting("OIDC_OP_JWKS_ENDPOINT", "URL", "", "The provider's signing keys.", SSO),
    Setting("OIDC_OP_ISSUER", "URL", "", "The provider's issuer; accounts are found by issuer and subject.", SSO),
    Setting("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", "whole number", "900", "How often a signed-in SSO session goes back "
            "to the provider silently, so group changes and disabled accounts take effect.", SSO),
    Setting("OIDC_GROUPS_CLAIM", "text", "groups", "The ID token claim that lists the person's groups.", SSO),
    Setting("OIDC_ADMIN_GROUPS", "list", "gpu-portal-admins", "Groups whose members are platform admins (and Django "
            "admin staff).", SSO),
    Setting("OIDC_FINANCE_GROUPS", "list", "gpu-portal-finance", "Groups whose members are finance.", SSO),
    Setting("OIDC_TEAM_GROUP_PREFIX", "text", "team-", "A group `<prefix><slug>` makes its members members of that "
            "team.", SSO),
    Setting("OIDC_TEAM_LEAD_SUFFIX", "text", "-leads", "A group `<prefix><slug><suffix>` makes its members leads of "
            "that team; a group naming an existing team exactly is always its membership.", SSO),
    Setting("OIDC_ADOPT_UNLINKED_ACCOUNTS", "yes/no", "false", "For a site upgrading from username matching: an SSO "
            "sign-in adopts a same-named account only the old single sign-on could have made.", SSO),
    Setting("OIDC_REVALIDATE_AFTER", "whole number", str(24 * 60 * 60), "Seconds after which an SSO account whose "
            "groups the provider has not confirmed is due for confirmation.", SSO),
    Setting("OIDC_REVALIDATE_GRACE", "whole number", str(60 * 60), "Seconds after that when an account still "
            "unconfirmed loses its group-derived roles and its API tokens.", SSO),
    Setting("OIDC_REVALIDATE_CHECK", "text", "", "A dotted path to a callable that asks the provider for an "
            "account's current claims (None when it cannot tell); without one only sign-ins confirm.", SSO),
    # --- The cluster
    Setting("PORTAL_CLUSTER", "text", "simulated", "`simulated` (the embedded cluster, kept in the database) or "
            "`kubernetes` (a real one).", CLUSTER),
    Setting("SIMULATED_WATCH_SEED", "text", "1", "Seeds the order in which the simulated cluster's watches deliver "
            "kinds that change together.", CLUSTER),
    Setting("KUBECONFIG", "path", "", "The kubeconfig file for a real cluster when not in one.", CLUSTER),
    Setting("KUBE_CONTEXT", "text", "", "The kubeconfig context to use; empty takes its current one.", CLUSTER),
    Setting("KUBE_IN_CLUSTER", "yes/no", "false", "Talk to the cluster the portal runs in, with its pod's service "
            "account.", CLUSTER),
    Setting("KUBE_QPS", "number", "50", "Requests a second the gateway sends the API server (client-side rate "
            "limit).", CLUSTER),
    Setting("KUBE_BURST", "whole number", "100", "Requests the gateway may send at once above that rate.", CLUSTER),
    Setting("PORTAL_QUEUE_BACKEND", "text", "kueue", "The queue backend that keeps teams' quota and admits "
            "workloads: `kueue` or `volcano` (docs/queue-backends.md); another value stops the start, and a switch "
            "while workloads still run on the other is refused.", CLUSTER),
    Setting("PORTAL_COHORT", "text", "gpu-portal", "The Kueue cohort every team's ClusterQueue joins, so idle quota "
            "can be borrowed across teams; a team in a department joins the department's cohort under it, "
            "`<PORTAL_COHORT>-<department>` (Kueue only: on Volcano every Queue shares the cluster).", CLUSTER),
    Setting("PORTAL_NAMESPACE_PREFIX", "text", "", "Put before every team's namespace and ClusterQueue name (up to 31 "
            "lowercase letters, digits and hyphens); set it before the first team.", CLUSTER),
    Setting("KUBE_OIDC_USERNAME_CLAIM", "text", "sub", "The claim the API server names OIDC users by (`sub` or "
            "`email`), for the members' RoleBinding; must equal its `--oidc-username-claim`.", CLUSTER),
    Setting("KUBE_OIDC_USERNAME_PREFIX", "text", COMPUTED, "The API server's `--oidc-username-prefix`; `-` for "
            "none.", CLUSTER, default_text="`PORTAL_CLUSTER_USER_PREFIX`, else `oidc:`"),
    Setting("PORTAL_CLUSTER_USER_PREFIX", "text", "", "Former name of `KUBE_OIDC_USERNAME_PREFIX`, read when that is "
            "not set.", CLUSTER),
    Setting("KUBE_OIDC_ISSUER", "URL", COMPUTED, "Only SSO identities of this issuer are bound in team namespaces; "
            "empty binds every SSO account.", CLUSTER, default_text="`OIDC_OP_ISSUER`"),
    Setting("PORTAL_MEMBER_CLUSTER_ROLE", "text", "view", "The ClusterRole the members' RoleBinding grants in their "
            "team's namespace; the chart sets its own read-only one.", CLUSTER),
    Setting("PORTAL_NAMESPACED_READS", "yes/no", "false", "Read pods, logs, events and volumes only in team "
            "namespaces, through a RoleBinding the portal makes in each (the chart's `rbac.namespacedReads`).",
            CLUSTER),
    Setting("PORTAL_TEAM_NAMESPACE_ROLE", "text", "", "With namespaced reads, the ClusterRole the portal binds its own "
            "ServiceAccount to in each team namespace.", CLUSTER),
    Setting("PORTAL_SERVICE_ACCOUNT", "text", "", "With namespaced reads, the portal's own ServiceAccount (in "
            "`PORTAL_NAMESPACE`).", CLUSTER),
    Setting("PORTAL_DEVICE_PLUGIN_POD_LABELS", "labels", "", "The labels of the GPU device plugin's pods, e.g. "
            "`app=nvidia-device-plugin-daemonset` (the GPU operator's, the chart's default) or "
            "`app.kubernetes.io/name=nvidia-device-plugin` (the plugin's own chart): the nodes page says which nodes "
            "run one. Empty: not looked for (the simulated cluster has none).", CLUSTER),
    Setting("PORTAL_GPU_EXPORTER_POD_LABELS", "labels", "", "The labels of the GPU metrics exporter's pods, e.g. "
            "`app=nvidia-dcgm-exporter` (the chart's default): the nodes page says which nodes run one. Empty: not "
            "looked for.", CLUSTER),
    Setting("PORTAL_TEAM_PASS_SECONDS", "number", "60", "How often the watcher compares every team's objects with "
            "its watch-kept store and repairs what differs; 0 leaves it to the worker's pass every 10 minutes.",
            CLUSTER),
    Setting("PORTAL_POD_ANNOTATIONS", "JSON object", "{}", "Annotations every workload pod gets (the simulated "
            "cluster and KWOK read fake run times from them; demo and test clusters only).", CLUSTER),
    # --- Leader election
    Setting("PORTAL_LEADER_ELECTION", "yes/no", "false", "The watch sync elects one writer through a Lease, so it "
            "may run as several replicas.", LEADER),
    Setting("POD_NAME", "text", "", "The pod's name, the start of its Lease holder name (else the host name).",
            LEADER),
    Setting("POD_NAMESPACE", "namespace", COMPUTED, "Where the Leases live.", LEADER,
            default_text="`PORTAL_NAMESPACE`"),
    Setting("PORTAL_LEADER_LEASE", "text", "gpu-portal-watcher", "The watch sync's Lease.", LEADER),
    Setting("PORTAL_BEAT_LEASE", "text", "gpu-portal-beat", "Beat's Lease (`manage.py run_beat`).", LEADER),
    Setting("PORTAL_LEASE_DURATION_SECONDS", "whole number", "15", "How long others wait after the leader's last "
            "renewal before taking over.", LEADER),
    Setting("PORTAL_LEASE_RENEW_DEADLINE_SECONDS", "number", "10", "A leader that cannot renew for this long stops "
            "writing; shorter than the duration.", LEADER),
    Setting("PORTAL_LEASE_RETRY_PERIOD_SECONDS", "number", "2", "How often the leader renews and the others try; the "
            "deadline must exceed 1.2 of it.", LEADER),
    # --- Team network policies
    Setting("PORTAL_NAMESPACE", "namespace", COMPUTED, "Where the portal's pods run; team policies admit its pods "
            "to the servers it asks (the idle check, Try it).", NETWORK,
            default_text="the pod's namespace (from its service-account token mount), else `gpu-portal`"),
    Setting("PORTAL_POD_LABELS", "labels", "app.kubernetes.io/name=gpu-portal", "Labels of the portal's pods that ask "
            "team servers (the idle check, the Try it box); empty admits every pod of `PORTAL_NAMESPACE`.", NETWORK),
    Setting("PORTAL_INGRESS_NAMESPACE", "text", "ingress-nginx", "The ingress controller's namespace, admitted to "
            "inference and notebook pods.", NETWORK),
    Setting("PORTAL_DNS_NAMESPACE", "namespace", "kube-system", "Where the cluster DNS runs.", NETWORK),
    Setting("PORTAL_DNS_POD_LABELS", "labels", "k8s-app=kube-dns", "The cluster DNS pods team pods may reach on "
            "port 53.", NETWORK),
    Setting("PORTAL_EGRESS_INTERNET", "text", "off", "`on` lets team pods reach the internet (`0.0.0.0/0`, "
            "`::/0`).", NETWORK),
    Setting("PORTAL_EGRESS_EXCLUDE_PRIVATE", "yes/no", "true", "With the internet on, leave out the private ranges "
            "where pods, services and nodes live.", NETWORK),
    Setting("PORTAL_EGRESS_ALLOW_CIDRS", "list", "", "Extra networks team pods may reach (the cloud metadata address "
            "is always cut out).", NETWORK),
    Setting("PORTAL_EGRESS_ALLOW_NAMESPACES", "list", "", "Extra namespaces team pods may reach, e.g. a registry "
            "mirror.", NETWORK),
    # --- Workload endpoints
    Setting("PORTAL_INGRESS_DOMAIN", "text", "", "The domain inference servers and notebooks get an Ingress under "
            "(`wl-<id>-<team>.<domain>`); empty makes none.", ENDPOINTS),
    Setting("PORTAL_INGRESS_CLASS", "text", "nginx", "Those Ingresses' class; the gate needs ingress-nginx's external "
            "authentication.", ENDPOINTS),
    Setting("PORTAL_INGRESS_TLS_SECRET", "text", "", "A Secret holding a wildcard certificate for `*.<domain>` in every "
            "team namespace.", ENDPOINTS),
    Setting("PORTAL_INGRESS_CLUSTER_ISSUER", "text", "", "Instead, a cert-manager ClusterIssuer that issues one "
            "certificate per host (not both).", ENDPOINTS),
    Setting("PORTAL_ENDPOINT_ROUTES", "text", "ingress", "How those endpoints are routed: `ingress` (an Ingress "
            "per workload, gated through ingress-nginx's external authentication) or `gateway` (a Gateway API "
            "HTTPRoute per workload on `PORTAL_GATEWAY`).", ENDPOINTS),
    Setting("PORTAL_GATEWAY", "text", "", "With `gateway` routes, the Gateway they attach to: `namespace/name`, or "
            "`namespace/name/listener` for one of its listeners.", ENDPOINTS),
    Setting("PORTAL_GATEWAY_AUTH_SERVICE", "text", "", "With `gateway` routes, the portal's Service as the gateway "
            "reaches it (`namespace/name:port`): each route then carries Gateway API's `ExternalAuth` filter to the "
            "gate `/auth/gateway/`, and the team pass grants the routes that reference (a ReferenceGrant per team). "
            "Empty: the gateway itself must send every request to the gate, or the endpoints are open.", ENDPOINTS),
    Setting("PORTAL_GATEWAY_TLS", "yes/no", "true", "With `gateway` routes, whether the Gateway's listener terminates "
            "TLS for `*.<domain>` (the pages then say https://).", ENDPOINTS),
    Setting("PORTAL_INGRESS_AUTH_URL", "URL", COMPUTED, "The portal as the ingress controller reaches it, for the "
            "gate `/auth/workloads/<id>/`; its host must be in `ALLOWED_HOSTS`.", ENDPOINTS,
            default_text="`SITE_URL`"),
    Setting("PORTAL_NOTEBOOK_TOKEN_KEY", "secret", COMPUTED, "The key notebook tokens are derived from; changing it "
            "makes running notebooks' tokens unrecoverable.", ENDPOINTS, default_text="`SECRET_KEY`"),
    Setting("PORTAL_NOTEBOOK_STATUS_URL", "URL", "http://{name}.{namespace}.svc.cluster.local/api/status", "Where the "
            "idle check asks a notebook server for its last activity.", ENDPOINTS),
    Setting("PORTAL_INFERENCE_URL", "URL", "http://{name}.{namespace}.svc.cluster.local", "Where the portal asks an "
            "inference server the questions of its page's Try it box (its OpenAI-compatible `/v1/…`).", ENDPOINTS),
    Setting("PORTAL_WORKSPACE_STATUS_URL", "URL", "http://{name}.{namespace}.svc.cluster.local/healthz", "Where the "
            "idle check asks a VS Code workspace (code-server) when it was last used.", ENDPOINTS),
    # --- Workloads, templates and quota
    Setting("PORTAL_TEAM_MAX_WORKLOADS", "whole number", "200", "The most workloads a team may have active at once; "
            "the team's ResourceQuota counts its Jobs, Deployments, StatefulSets, Services and Ingresses to the same "
            "number.", WORKLOADS),
    Setting("PORTAL_IMAGE_REGISTRIES", "list", "", "Registries (`host` or `host/path`) templates may always pull "
            "from, on top of the allow-list platform admins keep.", WORKLOADS),
    Setting("PORTAL_GIT_SOURCES", "list", "", "Git sources (`host` or `host/path`, whole segments) git parameters may "
            "fetch from, on top of the admins' list.", WORKLOADS),
    Setting("PORTAL_GIT_IMAGE", "text", "docker.io/alpine/git:v2.47.2", "The image of the init container that fetches "
            "a repository (it needs `sh` and `git`).", WORKLOADS),
    Setting("PORTAL_LAUNCH_RATE", "rate", "30/minute", "Launches and relaunches one person may make, pages and API "
            "together; past it the API answers 429.", WORKLOADS),
    Setting("PORTAL_SUBMITTING_BOUND_SECONDS", "whole number", "120", "A workload still submitting after this long "
            "gets a reason in words and is sent again.", WORKLOADS),
    Setting("PORTAL_QUOTA_FOUR_EYES_DEFAULT", "yes/no", "true", "New teams get four eyes on quota (whoever files a "
            "request cannot approve it); platform admins change it per team.", WORKLOADS),
    # --- Health and readiness
    Setting("PORTAL_READINESS_CHECKS", "list", "database,broker,worker,beat,watcher", "What `/readyz` checks; leave "
            "out what a site does not run.", HEALTH),
    Setting("PORTAL_HEARTBEAT_STALE_SECONDS", "whole number", "60", "A heartbeat older than this means its process is "
            "down or stuck.", HEALTH),
    Setting("PORTAL_READINESS_BROKER_TIMEOUT", "number", "2", "Seconds the readiness check waits for the broker.",
            HEALTH),
    # --- GPU telemetry
    Setting("PROMETHEUS_URL", "URL", "", "The Prometheus that holds dcgm-exporter's metrics.", TELEMETRY),
    Setting("PORTAL_METRICS", "text", COMPUTED, "Where GPU metrics come from: `prometheus`, `simulated` or `off` "
            "(every workload reads \"no metrics\", never idle).", TELEMETRY,
            default_text="`prometheus` with `PROMETHEUS_URL`, else `simulated` on the simulated cluster, else `off`"),
    Setting("PROMETHEUS_TOKEN", "secret", "", "A bearer token for Prometheus.", TELEMETRY),
    Setting("PROMETHEUS_TOKEN_FILE", "path", "", "A file holding that token (e.g. a projected service-account "
            "token).", TELEMETRY),
    Setting("PROMETHEUS_CA_FILE", "path", "", "A CA bundle for a Prometheus behind TLS.", TELEMETRY),
    Setting("PROMETHEUS_TIMEOUT", "number", "10", "Seconds a metrics query may take.", TELEMETRY),
    Setting("PROMETHEUS_RECORDING_RULES", "yes/no", "true", "Read averages and per-pod chart figures from "
            "`deploy/prometheus/`'s recording rules; off computes them from the raw series at query time, which at "
            "hundreds of GPUs puts a team's month over Prometheus's `--query.max-samples` (the page then says so).",
            TELEMETRY),
    # --- Billing
    Setting("BILLING_TIME_ZONE", "text", "UTC", "The time zone whose hours, days and months usage, budgets and "
            "statements count in.", BILLING),
    Setting("BUDGETS_CHECK_SECONDS", "number", "300", "How often budgets are checked against usage (alerts, hard "
            "stops).", BILLING),
    Setting("BUDGET_DIGEST_HOUR", "whole number", "8", "The local hour (0 to 23, billing time zone) from which daily "
            "budget digests go out.", BILLING),
    Setting("PORTAL_EMISSION_FACTOR_KG_PER_KWH", "text", "", "The site's electricity emission factor in kg CO₂e per "
            "kWh (e.g. 0.233): usage pages, the API and statements then give the GPUs' energy in kg CO₂e beside the "
            "kWh. Empty: kWh only.", BILLING),
    # --- Email
    Setting("EMAIL_BACKEND", "text", "django.core.mail.backends.console.EmailBackend", "Django's email backend; the "
            "default writes emails to the log.", EMAIL),
    Setting("EMAIL_HOST", "text", "localhost", "The SMTP server.", EMAIL),
    Setting("EMAIL_PORT", "whole number", "25", "The SMTP server's port.", EMAIL),
    Setting("DEFAULT_FROM_EMAIL", "text", "GPU Portal <gpu-portal@localhost>", "The sender of the portal's emails.",
            EMAIL),
    # --- Logging
    Setting("LOG_LEVEL", "text", "INFO", "The root logger's level.", LOGGING),
    Setting("LOG_FORMAT", "text", COMPUTED, "`json` (one object per line, with the request id) or `text`.", LOGGING,
            default_text="`json` in production, else `text`"),
)

# Settings the portal no longer reads: setting one stops the start and names its replacement.
_PER_ADDRESS = "sign-ins now wait per account and address, with backoff (a lockout per account let anyone lock its owner out)"
RETIRED: tuple[Retired, ...] = (
    Retired("PORTAL_LOGIN_FAILURE_LIMIT", "PORTAL_LOGIN_FAILURES_BEFORE_WAIT", _PER_ADDRESS),
    Retired("PORTAL_LOGIN_LOCKOUT_SECONDS", "PORTAL_LOGIN_BACKOFF_MAX_SECONDS", _PER_ADDRESS),
)

DECLARED: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}


# --- Readers: the only code that reads the environment for a setting ---------------------------


def declared(name: str, *types: Type) -> Setting:
    setting = DECLARED.get(name)
    if setting is None:
        raise ImproperlyConfigured(f"{name} is read as a setting but portal/configuration.py does not declare it.")
    if types and setting.type not in types:
        raise ImproperlyConfigured(f"{name} is declared as {setting.type}, not read as {' or '.join(types)}.")
    return setting


def _default(setting: Setting, computed: str | None) -> str:
    """The declared default, or for a COMPUTED one the value the settings module worked out."""
    if setting.default is None:  # COMPUTED
        if computed is None:
            raise ImproperlyConfigured(f"{setting.name}'s default is computed, so the settings module must pass it.")
        return computed
    if computed is not None:
        raise ImproperlyConfigured(f"{setting.name}'s default is declared ({setting.default!r}); do not pass another.")
    return setting.default


def production() -> bool:
    return text("PORTAL_PRODUCTION") in {"1", "true", "yes"}


def text(name: str, default: str | None = None) -> str:
    """The value as written, or the default when unset or empty; a missing production setting stops the start."""
    setting = declared(name, "text", "secret", "URL", "path")
    value = os.environ.get(name)
    if value:
        return value
    if setting.production and production():
        raise ImproperlyConfigured(
            f"{name} is not set. PORTAL_PRODUCTION is on, so {name} must be given in the environment."
        )
    return _default(setting, default)


def boolean(name: str, default: bool | None = None) -> bool:
    setting = declared(name, "yes/no")
    value = os.environ.get(name)
    if value is None:
        value = _default(setting, None if default is None else str(default).lower())
    return value.lower() in {"1", "true", "yes", "on"}


def whole(name: str) -> int:
    return int(_raw(declared(name, "whole number")))


def optional_whole(name: str) -> int | None:
    value = _raw(declared(name, "whole number"))
    return int(value) if value else None


def number(name: str) -> float:
    return float(_raw(declared(name, "number")))


def _raw(setting: Setting) -> str:
    return os.environ.get(setting.name) or _default(setting, None)


def items(name: str, default: str | None = None) -> list[str]:
    """A comma-separated list; set but empty is an empty list, not the default."""
    setting = declared(name, "list")
    value = os.environ.get(name)
    found = [item.strip() for item in (_default(setting, default) if value is None else value).split(",") if item.strip()]
    if not found and setting.production and production():
        raise ImproperlyConfigured(f"{name} is not set. PORTAL_PRODUCTION is on, so {name} must be given.")
    return found


def labels(name: str) -> tuple[tuple[str, str], ...]:
    setting = declared(name, "labels")
    value = os.environ.get(name)
    return parse_labels(name, _default(setting, None) if value is None else value)


def rate(name: str) -> tuple[int, int]:
    return parse_rate(name, _raw(declared(name, "rate")))


def namespace(name: str, default: str | None = None) -> str:
    setting = declared(name, "namespace")
    return parse_namespace(name, os.environ.get(name) or _default(setting, default))


def json_object(name: str) -> dict[str, str]:
    value: dict[str, str] = json.loads(_raw(declared(name, "JSON object")))
    return value


def retired_refused() -> None:
    """A retired setting still set stops the start with its replacement's name rather than being ignored."""
    for gone in RETIRED:
        if os.environ.get(gone.name):
            raise ImproperlyConfigured(f"{gone.name} is no longer read: {gone.why}. Set {gone.instead} "
                                       "(see docs/configuration.md) instead.")


# --- Parsers of the structured types (pure) --------------------------------------------------------


def parse_labels(name: str, text: str) -> tuple[tuple[str, str], ...]:
    """Pod labels written "key=value,key=value" (empty: none), as pairs."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals or not re.fullmatch(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", key.strip()) \
                or not re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", value.strip()):
            raise ImproperlyConfigured(f'{name} must be Kubernetes labels written "key=value,key=value"; {item!r} is not one.')
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def parse_rate(name: str, text: str) -> tuple[int, int]:
    """A rate written "30/minute" (or second, hour, day) as (count, seconds)."""
    count, _, unit = text.partition("/")
    seconds = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}.get(unit.strip().removesuffix("s"))
    if not count.strip().isascii() or not count.strip().isdigit() or int(count) < 1 or seconds is None:
        raise ImproperlyConfigured(f'{name} must be a count per second, minute, hour or day, such as "30/minute"; '
                                   f"it is {text!r}.")
    return int(count), seconds


def parse_namespace(name: str, value: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
        raise ImproperlyConfigured(f"{name}: “{value}” is not a Kubernetes namespace name.")
    return value


_NAME = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # a namespace, a Service, a Gateway or a listener (DNS-1123 label)


def gateway_reference(name: str) -> tuple[str, ...]:
    """`namespace/name` or `namespace/name/listener`, as its parts; empty: ()."""
    value = text(name)
    if not value:
        return ()
    parts = tuple(value.split("/"))
    if len(parts) not in (2, 3) or not all(re.fullmatch(_NAME, part) for part in parts):
        raise ImproperlyConfigured(f"{name}: “{value}” is not namespace/name or namespace/name/listener "
                                   "(each lowercase letters, digits and hyphens).")
    return parts


def service_reference(name: str) -> tuple[str, str, int] | None:
    """`namespace/name:port`: a Service and the port it serves on; empty: None."""
    value = text(name)
    if not value:
        return None
    found = re.fullmatch(rf"({_NAME})/({_NAME}):([0-9]{{1,5}})", value)
    if found is None or not 0 < int(found.group(5)) < 65536:
        raise ImproperlyConfigured(f"{name}: “{value}” is not namespace/name:port, e.g. gpu-portal/gpu-portal:80.")
    return found.group(1), found.group(3), int(found.group(5))


# --- The reference page --------------------------------------------------------------------------------


def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def _shown_default(setting: Setting) -> str:
    if setting.default is None:  # COMPUTED
        return setting.default_text
    if setting.default == "":
        return "empty"
    return f"`{setting.default}`"


_GENERATED = ("<!-- Written by `python manage.py settings_reference` from portal/configuration.py: edit the "
              "declaration, not this page. -->")
_INTRO = ("Every setting comes from the environment, read once by `portal/settings.py` through the declaration in "
          "`portal/configuration.py`. With none set the portal runs embedded (SQLite, a file-system broker, the "
          "simulated cluster). With `PORTAL_PRODUCTION=1` the settings marked **required** must be set, and a "
          "missing one stops every process at start with its name. The Helm chart sets most of them from its values "
          "and passes any other by name through its `settings` value.")


def reference() -> str:
    """docs/configuration.md, written from the declaration (`manage.py settings_reference`)."""
    lines = [
        "# Configuration reference",
        "",
        _GENERATED,
        "",
        _INTRO,
        "",
        "## How values are written",
        "",
        "| type | written as |",
        "|---|---|",
        *(f"| {kind} | {_cell(how)} |" for kind, how in TYPES.items()),
        "",
    ]
    for group in GROUPS:
        lines += [f"## {group}", "", "| setting | type | default | effect |", "|---|---|---|---|"]
        for setting in (s for s in SETTINGS if s.group == group):
            required = " **Required in production.**" if setting.production else ""
            lines.append(f"| `{setting.name}` | {setting.type} | {_cell(_shown_default(setting))} | "
                         f"{_cell(setting.effect)}{required} |")
        lines.append("")
    lines += ["## Settings no longer read", "",
              "Setting one of these stops the start with its replacement's name, rather than being silently ignored.",
              "", "| setting | instead | why |", "|---|---|---|"]
    lines += [f"| `{gone.name}` | `{gone.instead}` | {gone.why} |" for gone in RETIRED]
    return "\n".join(lines) + "\n"
