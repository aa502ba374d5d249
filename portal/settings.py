"""The one settings module: everything comes from the environment.

Without any environment the portal runs embedded: SQLite, a file-system Celery broker and the
simulated cluster, so `make demo` needs nothing but the repository. With `PORTAL_PRODUCTION=1`
every value a real site must set is required, and a missing one stops the start with its name.

Each environment variable is declared once, with its type, default and effect, in
`portal/configuration.py`, and read here only through its readers (`config.text`, `config.whole`,
...), which refuse a name the declaration lacks; docs/configuration.md is written from it.
"""

from __future__ import annotations

import re
import zoneinfo
from decimal import Decimal, InvalidOperation
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal import configuration as config

# The checkout, or in the image the folder beside the installed wheel that holds manage.py,
# templates/, static/ and the collected staticfiles/ (PORTAL_APP_DIR, set by the Dockerfile).
BASE_DIR = Path(config.text("PORTAL_APP_DIR", str(Path(__file__).resolve().parent.parent)))
VAR_DIR = Path(config.text("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

PRODUCTION = config.production()

SECRET_KEY = config.text("SECRET_KEY")
DEBUG = config.boolean("DEBUG", default=not PRODUCTION)
ALLOWED_HOSTS = config.items("ALLOWED_HOSTS", "" if PRODUCTION else "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = config.items("CSRF_TRUSTED_ORIGINS")
SITE_URL = config.text("SITE_URL").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rules.apps.AutodiscoverRulesConfig",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "template_partials",
    "django_celery_beat",
    "mozilla_django_oidc",
    "portal",
    "tenants",
    "jobs",
    "billing",
    "demo",
]

MIDDLEWARE = [
    "portal.security.GatewayGateHostMiddleware",  # before anything reads the Host
    "portal.observability.RequestIdMiddleware",
    "portal.observability.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.security.ContentSecurityPolicyMiddleware",
    "portal.security.PermissionsPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.security.RefuseUnreadableTextMiddleware",  # before the session's cookie reaches the database
    "django.contrib.sessions.middleware.SessionMiddleware",
    "portal.security.SessionLifetimeMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.htmx.HtmxPagesMiddleware",  # Vary: HX-Request; signed out, back to the page after sign-in
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
AUTH_USER_MODEL = "portal.User"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.portal",
            ],
            "builtins": ["portal.templatetags.portal_time"],
        },
    },
]

# Embedded default: one SQLite file under var/. Production: DATABASE_URL (PostgreSQL).
DATABASE_URL = config.text("DATABASE_URL")
# How long opening a PostgreSQL connection may take: an address that drops packets otherwise
# holds a readiness probe (and a web worker) for minutes instead of failing it with a reason.
PORTAL_DATABASE_CONNECT_TIMEOUT = config.whole("PORTAL_DATABASE_CONNECT_TIMEOUT")
if DATABASE_URL:
    try:
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
    except ValueError as error:  # said without the URL, which may hold a password
        why = (f"its scheme “{DATABASE_URL.partition('://')[0][:20]}” is not postgres, postgresql or sqlite"
               if isinstance(error, dj_database_url.UnknownSchemeError) else
               "it does not parse (a port that is not a number, or a character in the password not %-quoted?)")
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a database URL: {why}. Write it like postgres://USER:PASSWORD@HOST:5432/NAME."
        ) from None
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", PORTAL_DATABASE_CONNECT_TIMEOUT)
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "portal.sqlite3"),
            # The web process and the worker write the same file; wait instead of failing.
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# SQLite makes no NULLS NOT DISTINCT constraint (UsageHour's key): billing/migrations/0008 gives it the
# same key as an expression index instead, so the warning says nothing a site must act on.
SILENCED_SYSTEM_CHECKS = ["models.W047"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = config.text("TIME_ZONE")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(config.text("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# Outside production WhiteNoise serves static files straight from the app folders, so a site run
# with DEBUG off (the demo: its 403/404/500 pages are the branded ones) still has its CSS.
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = not PRODUCTION

LOGIN_URL = "/login/"
# A form sent with a stale CSRF token gets the portal's page, which says why and leads back to it.
CSRF_FAILURE_VIEW = "portal.views.csrf_failure"
# Not the dashboard itself: tenants.views.landing sends finance whose only role is finance to
# the finance overview.
LOGIN_REDIRECT_URL = "/start/"
LOGOUT_REDIRECT_URL = "/login/"

# --- Security (production) ---------------------------------------------------------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = config.boolean("SECURE_SSL_REDIRECT")
    SECURE_HSTS_SECONDS = config.whole("SECURE_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Probes speak plain HTTP to the pod.
    # Prometheus scrapes /metrics pod to pod, where there is no HTTPS to redirect to (its bearer token
    # has crossed that hop before any redirect could answer).
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# /metrics names every route and how often it is used: with a token only its bearer reads them;
# without one they are open in the embedded setup and closed in production (portal/observability.py).
METRICS_TOKEN = config.text("METRICS_TOKEN")
# Scripts and styles come only from the portal's own static files: no inline <script>, no
# style="" attributes, no eval (htmx's is turned off in base.html). The API docs relax it for
# their pages only (portal/urls.py). A site trying a changed policy can send it report-only.
CONTENT_SECURITY_POLICY = config.text("CONTENT_SECURITY_POLICY")
CONTENT_SECURITY_POLICY_REPORT_ONLY = config.boolean("CONTENT_SECURITY_POLICY_REPORT_ONLY")
# Browser features no page of the portal uses, refused to it and to anything it frames, so a script
# that slipped in cannot ask for the camera or a payment. The Copy buttons' clipboard is left at the
# browser's default (this site only). Empty sends no header.
PERMISSIONS_POLICY = config.text("PERMISSIONS_POLICY")
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
# A session ends after this long without a request, not 14 days after login, so a laptop left
# signed in stops being a way in. Requests move its end forward (portal.security.SessionLifetimeMiddleware),
# saving the session at most once per SESSION_REFRESH_SECONDS rather than on every poll.
SESSION_IDLE_SECONDS = config.whole("SESSION_IDLE_SECONDS")
SESSION_REFRESH_SECONDS = config.whole("SESSION_REFRESH_SECONDS")
SESSION_COOKIE_AGE = SESSION_IDLE_SECONDS
# And whatever its use, a session ends this long after its sign-in: a page left open polls the bell
# every few seconds, so without it a stolen or forgotten session would never end. 12 hours is a
# working day with room to spare, so people sign in about once a day, and it is the most NIST SP
# 800-63B allows between authentications at AAL2 (section 4.2.3). A silent single sign-on refresh
# does not start it over.
SESSION_ABSOLUTE_SECONDS = config.whole("SESSION_ABSOLUTE_SECONDS")
if SESSION_ABSOLUTE_SECONDS < 60:
    raise ImproperlyConfigured(f"SESSION_ABSOLUTE_SECONDS is {SESSION_ABSOLUTE_SECONDS}: a session must last a minute at least.")

# --- Authentication: local accounts, API tokens, optional OpenID Connect ------------------
OIDC_ENABLED = bool(config.text("OIDC_RP_CLIENT_ID"))
AUTHENTICATION_BACKENDS = [
    "rules.permissions.ObjectPermissionBackend",
    "portal.signin.SignInLockout",
    "django.contrib.auth.backends.ModelBackend",
]
if OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.insert(0, "tenants.oidc.PortalOIDCBackend")
    OIDC_RP_CLIENT_ID = config.text("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = config.text("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_SIGN_ALGO = config.text("OIDC_RP_SIGN_ALGO")
    OIDC_RP_SCOPES = config.text("OIDC_RP_SCOPES")
    OIDC_OP_AUTHORIZATION_ENDPOINT = config.text("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = config.text("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = config.text("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = config.text("OIDC_OP_JWKS_ENDPOINT")
    OIDC_OP_ISSUER = config.text("OIDC_OP_ISSUER")
    OIDC_OP_LOGOUT_URL_METHOD = ""
    # A signed-in SSO user goes back to the provider (silently, prompt=none) this often, so
    # group changes and accounts disabled at the provider take effect without a new login.
    OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = config.whole("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS")
    MIDDLEWARE.append("tenants.oidc.PortalSessionRefresh")
# Group claims map to roles: a group in OIDC_ADMIN_GROUPS makes a platform admin (and Django
# admin staff), one in OIDC_FINANCE_GROUPS finance; "<prefix><slug>" a team member and
# "<prefix><slug><lead suffix>" a team lead, except that a group naming an existing team exactly
# is always that team's membership. Roles and memberships the claims no longer carry are removed
# at the next login; an SSO account is never a superuser. SSO accounts are found by the ID
# token's (iss, sub), never by username, and never log into an account with a local password.
OIDC_GROUPS_CLAIM = config.text("OIDC_GROUPS_CLAIM")
OIDC_ADMIN_GROUPS = config.items("OIDC_ADMIN_GROUPS")
OIDC_FINANCE_GROUPS = config.items("OIDC_FINANCE_GROUPS")
OIDC_TEAM_GROUP_PREFIX = config.text("OIDC_TEAM_GROUP_PREFIX")
OIDC_TEAM_LEAD_SUFFIX = config.text("OIDC_TEAM_LEAD_SUFFIX")
# For a site upgrading from username matching: an SSO login may adopt an account of the same
# username that only the old single sign-on could have made (no password, no superuser or staff
# bit, no identity yet). Off by default; turn it on for the first logins after the upgrade.
OIDC_ADOPT_UNLINKED_ACCOUNTS = config.boolean("OIDC_ADOPT_UNLINKED_ACCOUNTS")
# Roles otherwise change only at a sign-in: an SSO account whose groups the provider has not
# vouched for (a login, a silent refresh, the check below) for OIDC_REVALIDATE_AFTER seconds is
# due for confirmation, and one still unconfirmed OIDC_REVALIDATE_GRACE seconds later loses every
# group-derived role (platform admin, finance, team memberships) and its API tokens, until it
# signs in again. OIDC_REVALIDATE_CHECK names a callable(SsoIdentity) -> claims | None that asks
# the provider (e.g. its admin or SCIM API); without one, only sign-ins confirm.
OIDC_REVALIDATE_AFTER = config.whole("OIDC_REVALIDATE_AFTER")
OIDC_REVALIDATE_GRACE = config.whole("OIDC_REVALIDATE_GRACE")
OIDC_REVALIDATE_CHECK = config.text("OIDC_REVALIDATE_CHECK")
API_TOKEN_MAX_DAYS = config.whole("API_TOKEN_MAX_DAYS")

# --- REST API ----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.adapters.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.adapters.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "portal.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["portal.adapters.ListFilterBackend"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "portal.security.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Teams, GPU flavors, quota requests and grants, workload templates and workloads (launch, watch, "
    "stop, relaunch, logs, why it waits), audit events and notifications. "
    "Authenticate with `Authorization: Token <token>` (create one under API tokens).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema maps every endpoint and field: for people signed in (a session or a token), not anonymous
    # visitors. The docs pages ask for a sign-in too (portal/urls.py).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "portal.schema.add_summaries",
                            "portal.adapters.document_error_responses"],
    "ENUM_NAME_OVERRIDES": {"TeamSyncStateEnum": "tenants.models.Team.SyncState", "PriorityEnum": "jobs.models.Priority",
                            "KindEnum": "jobs.models.WorkloadKind", "StatementLineKindEnum": "billing.models.StatementLine.Kind",
                            "CredentialKindEnum": "jobs.models.TeamCredential.Kind",
                            # A team volume's and a credential's: the same two states.
                            "TeamObjectStateEnum": "jobs.models.TeamVolume.State"},
}

# --- Celery --------------------------------------------------------------------------------
# Embedded: a broker on the file system, so a worker needs no server; portal/broker.py makes
# kombu's transport safe for several producers and consumers. Production: Redis.
REDIS_URL = config.text("REDIS_URL")
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
if not REDIS_URL:
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "claimed_folder": str(_broker_dir / "claimed"),
        "quarantine_folder": str(_broker_dir / "quarantine"),
        "control_folder": str(_broker_dir / "control"),
    }
else:
    # Acknowledged late, a task taken by a worker that dies (kill -9, a lost node) stays in Redis
    # and goes to a worker again once this many seconds passed since it was taken. Longer than any
    # task runs or waits for its countdown (retries wait at most 120 s), or it would run twice
    # while the first is still waiting; the periodic passes (resubmitting lost workloads, the
    # cluster reconcile) repair sooner what a dead worker held.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": config.whole("CELERY_VISIBILITY_TIMEOUT_SECONDS")}
    # A running worker looks for such tasks only every 10 s x 10 (kombu's interval and throttle):
    # with a short visibility timeout (the fault suite's) the look, not the timeout, decides how
    # soon they run again. Set, it makes the look every this many seconds; unset, kombu's 100 s.
    if (_restore := config.optional_whole("CELERY_UNACKED_RESTORE_SECONDS")) is not None:
        CELERY_BROKER_TRANSPORT_OPTIONS |= {"unacked_restore_interval": _restore, "unacked_restore_throttle": 1}
# The queue tasks go to and workers take from: one per site, or per test run that shares a Redis.
CELERY_TASK_DEFAULT_QUEUE = config.text("CELERY_TASK_DEFAULT_QUEUE")
CELERY_TASK_ALWAYS_EAGER = config.boolean("CELERY_TASK_ALWAYS_EAGER")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "quota-grants-expire": {"task": "tenants.tasks.quota_grants_expire", "schedule": 60.0},
    # The safety net: the watcher's team pass (PORTAL_TEAM_PASS_SECONDS) works from a watch-kept
    # store; this one lists everything the portal owns.
    "cluster-reconcile": {"task": "tenants.tasks.cluster_reconcile", "schedule": 600.0},
    "flavor-nodes-check": {"task": "tenants.tasks.flavor_nodes_check", "schedule": 60.0},
    "simulated-cluster-tick": {"task": "portal.tasks.simulated_cluster_tick", "schedule": 5.0},
    "workloads-sync": {"task": "jobs.tasks.workloads_sync", "schedule": 10.0},
    "workloads-resubmit-lost": {"task": "jobs.tasks.workloads_resubmit_lost", "schedule": 30.0},
    # Work waiting in the portal for its owner's per-person GPU limit, where the release its
    # owner's ending work sends was lost or the lead changed the limit.
    "person-limits-release": {"task": "jobs.tasks.person_limits_release_all", "schedule": 30.0},
    "volumes-repair": {"task": "jobs.tasks.volumes_repair", "schedule": 60.0},
    "credentials-repair": {"task": "jobs.tasks.credentials_repair", "schedule": 60.0},
    # Idle GPUs by each template's policy; also the notebooks' own activity where reachable.
    "idle-sweep": {"task": "jobs.tasks.idle_sweep", "schedule": 60.0},
    "xid-sweep": {"task": "jobs.tasks.xid_sweep", "schedule": 60.0},
    "sso-identities-revalidate": {"task": "tenants.tasks.sso_identities_revalidate", "schedule": 900.0},
    "budgets-check": {"task": "billing.tasks.budgets_check", "schedule": config.number("BUDGETS_CHECK_SECONDS")},
    # Hourly; each person's digest goes once a local day, at the first run after BUDGET_DIGEST_HOUR.
    "budget-digests-send": {"task": "billing.tasks.budget_digests_send", "schedule": 3600.0},
    # Usage rollups up to now: the open hour is recomputed, earlier hours only where an interval changed.
    "billing-rollups-refresh": {"task": "billing.tasks.rollups_refresh", "schedule": 60.0},
    # Each hour's GPU energy per team from telemetry, once the hour is over (and hours it missed).
    "billing-energy-meter": {"task": "billing.tasks.energy_meter", "schedule": 300.0},
    # Readiness reads beat's and the worker's heartbeats from it; an old one is useless, so it expires.
    "portal-heartbeat": {"task": "portal.tasks.heartbeat", "schedule": 10.0, "options": {"expire_seconds": 10}},
}

# --- Billing ---------------------------------------------------------------------------------
# Hours, days and months of usage and statements are those of this zone (a day may be 23 or 25 h).
BILLING_TIME_ZONE = config.text("BILLING_TIME_ZONE")
try:
    zoneinfo.ZoneInfo(BILLING_TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(
        f"BILLING_TIME_ZONE must be a time zone such as UTC or Europe/Berlin; it is {BILLING_TIME_ZONE!r}.") from None

# Budget alerts: the check runs every BUDGETS_CHECK_SECONDS (beat, above); the daily digest goes
# out from this local hour of the billing time zone.
BUDGET_DIGEST_HOUR = config.whole("BUDGET_DIGEST_HOUR")
if not 0 <= BUDGET_DIGEST_HOUR <= 23:
    raise ImproperlyConfigured(f"BUDGET_DIGEST_HOUR is an hour from 0 to 23; it is {BUDGET_DIGEST_HOUR}.")

# GPU energy in kg CO₂e beside the kWh, where the site gives its electricity's emission factor.
def _emission_factor(raw: str) -> Decimal | None:
    if not raw:
        return None
    try:
        factor = Decimal(raw)
    except InvalidOperation:
        factor = Decimal("NaN")
    if not factor.is_finite() or not Decimal(0) <= factor <= Decimal(5):
        raise ImproperlyConfigured("PORTAL_EMISSION_FACTOR_KG_PER_KWH is kg CO₂e per kWh, a number from 0 to 5 such as "
                                   f"0.233 (coal is about 1); it is {raw!r}.")
    return factor


PORTAL_EMISSION_FACTOR_KG_PER_KWH = _emission_factor(config.text("PORTAL_EMISSION_FACTOR_KG_PER_KWH"))

# Four eyes on quota for new teams: whoever files a quota request cannot approve it, so a lead
# never grants their own team quota alone (a second lead or a platform admin decides). On unless
# the site says 0; a platform admin turns it off per team (a team with a single lead, say).
# Teams that existed before it was on by default keep the setting they have.
PORTAL_QUOTA_FOUR_EYES_DEFAULT = config.boolean("PORTAL_QUOTA_FOUR_EYES_DEFAULT")

# A workload still 'submitting' after this long gets a reason in words and is sent again.
PORTAL_SUBMITTING_BOUND_SECONDS = config.whole("PORTAL_SUBMITTING_BOUND_SECONDS")

# --- Readiness (/readyz) -------------------------------------------------------------------
# What /readyz checks; a site that runs no watch sync, say, leaves "watcher" out.
PORTAL_READINESS_CHECKS = config.items("PORTAL_READINESS_CHECKS")
# A heartbeat (every 10 s) older than this means its process is down or stuck.
PORTAL_HEARTBEAT_STALE_SECONDS = config.whole("PORTAL_HEARTBEAT_STALE_SECONDS")
PORTAL_READINESS_BROKER_TIMEOUT = config.number("PORTAL_READINESS_BROKER_TIMEOUT")

# --- Limits: workloads per team, launches per user, failed sign-ins -------------------------
# The most workloads a team may have active at once. The portal refuses the next launch with a
# sentence; the namespace's ResourceQuota counts Jobs, Deployments, StatefulSets, Services and
# Ingresses to the same number, so a token used straight against the cluster meets it too.
PORTAL_TEAM_MAX_WORKLOADS = config.whole("PORTAL_TEAM_MAX_WORKLOADS")
# Registries templates may pull images from, set at deployment (host, or host/path prefix;
# comma-separated). Platform admins add more under Image registries (admin and API); a template's
# image must match one of either list.
PORTAL_IMAGE_REGISTRIES = config.items("PORTAL_IMAGE_REGISTRIES")
# Where a template's git parameters may fetch code from (host, or host/path prefix, whole
# segments; comma-separated, e.g. "github.com/acme,gitlab.example.com"). Empty: nowhere.
PORTAL_GIT_SOURCES = config.items("PORTAL_GIT_SOURCES")
# The image of the init container that fetches a repository (it needs `sh` and `git`); it runs
# as the workload's non-root user under Pod Security `restricted`.
PORTAL_GIT_IMAGE = config.text("PORTAL_GIT_IMAGE")
# Launches (and relaunches) one user may make, from the pages and the API together.
PORTAL_LAUNCH_RATE = config.rate("PORTAL_LAUNCH_RATE")
# Failed password sign-ins (portal/signin.py) slow down whoever fails, never the owner elsewhere.
# One account name from one client address fails PORTAL_LOGIN_FAILURES_BEFORE_WAIT times, then
# waits PORTAL_LOGIN_BACKOFF_SECONDS before trying again, twice as long after each further failure,
# up to PORTAL_LOGIN_BACKOFF_MAX_SECONDS (5 tries, then 30 s, 1, 2, 4, 8 and 15 minutes); a right
# password ends that run. Failures from other addresses never make the owner wait: past
# PORTAL_LOGIN_ACCOUNT_CEILING failures of one name across addresses (many addresses at it), each
# address waits from its first failure of that name, while one that has not failed still gets its
# try. An address failing PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT times across names (one client
# trying many) waits likewise. Counts start again every PORTAL_LOGIN_FAILURE_WINDOW_SECONDS (fixed
# windows): at most about 13 guesses an hour at one name from one address, then.
PORTAL_LOGIN_FAILURES_BEFORE_WAIT = config.whole("PORTAL_LOGIN_FAILURES_BEFORE_WAIT")
PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT = config.whole("PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT")
PORTAL_LOGIN_BACKOFF_SECONDS = config.whole("PORTAL_LOGIN_BACKOFF_SECONDS")
PORTAL_LOGIN_BACKOFF_MAX_SECONDS = config.whole("PORTAL_LOGIN_BACKOFF_MAX_SECONDS")
PORTAL_LOGIN_ACCOUNT_CEILING = config.whole("PORTAL_LOGIN_ACCOUNT_CEILING")
PORTAL_LOGIN_FAILURE_WINDOW_SECONDS = config.whole("PORTAL_LOGIN_FAILURE_WINDOW_SECONDS")
if not 1 <= PORTAL_LOGIN_BACKOFF_SECONDS <= PORTAL_LOGIN_BACKOFF_MAX_SECONDS:
    raise ImproperlyConfigured(
        f"PORTAL_LOGIN_BACKOFF_SECONDS ({PORTAL_LOGIN_BACKOFF_SECONDS}) must be at least 1 and at most "
        f"PORTAL_LOGIN_BACKOFF_MAX_SECONDS ({PORTAL_LOGIN_BACKOFF_MAX_SECONDS}).")
# The per-account lockout's settings, if still set, stop the start with their replacements' names.
config.retired_refused()
# How many proxies in front of the portal append to X-Forwarded-For; the client's address is
# that many entries from the right. 0 (the default) takes the connection's own address.
PORTAL_PROXY_HOPS = config.whole("PORTAL_PROXY_HOPS")
# The counters live in the cache. Several web processes must share one, so with Redis (the
# production setup) they use it; the embedded setup runs one web process and keeps them in memory.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                "KEY_PREFIX": "gpu-portal"}
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# --- Email ---------------------------------------------------------------------------------
EMAIL_BACKEND = config.text("EMAIL_BACKEND")
EMAIL_HOST = config.text("EMAIL_HOST")
EMAIL_PORT = config.whole("EMAIL_PORT")
DEFAULT_FROM_EMAIL = config.text("DEFAULT_FROM_EMAIL")

# --- GPU telemetry (portal/metrics/) ---------------------------------------------------------
# Where DCGM metrics are read: "prometheus" (PROMETHEUS_URL, the HTTP API), "simulated" (values
# that follow the simulated cluster's pods, for the demo) or "off" (every answer is "no metrics",
# so nothing is ever judged idle). The default follows the cluster: simulated with the simulated
# one, Prometheus where PROMETHEUS_URL is set, otherwise off.
PROMETHEUS_URL = config.text("PROMETHEUS_URL")
PORTAL_CLUSTER = config.text("PORTAL_CLUSTER")  # "simulated" or "kubernetes"
PORTAL_METRICS = config.text("PORTAL_METRICS", "prometheus" if PROMETHEUS_URL else
                             ("simulated" if PORTAL_CLUSTER == "simulated" else "off"))
if PORTAL_METRICS not in ("prometheus", "simulated", "off"):
    raise ImproperlyConfigured(f"PORTAL_METRICS is “prometheus”, “simulated” or “off”; it is {PORTAL_METRICS!r}.")
if PORTAL_METRICS == "prometheus" and not PROMETHEUS_URL:
    raise ImproperlyConfigured("PORTAL_METRICS is “prometheus”, so PROMETHEUS_URL (e.g. http://prometheus:9090) must be set.")
# A bearer token (or a file holding one, e.g. a projected service-account token) and a CA bundle
# for a Prometheus behind TLS and authentication; both optional.
PROMETHEUS_TOKEN = config.text("PROMETHEUS_TOKEN")
PROMETHEUS_TOKEN_FILE = config.text("PROMETHEUS_TOKEN_FILE")
PROMETHEUS_CA_FILE = config.text("PROMETHEUS_CA_FILE")
PROMETHEUS_TIMEOUT = config.number("PROMETHEUS_TIMEOUT")
# Read 5-minute and hourly averages from deploy/prometheus/'s recording rules; off for a
# Prometheus that does not load them (the raw series are averaged at query time instead).
PROMETHEUS_RECORDING_RULES = config.boolean("PROMETHEUS_RECORDING_RULES")

# --- Logging: one JSON object per line in production, readable lines in development ---------
LOG_LEVEL = config.text("LOG_LEVEL")
LOG_FORMAT = config.text("LOG_FORMAT", "json" if PRODUCTION else "text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "portal.observability.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "text": {"format": "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "mozilla_django_oidc": {"level": "INFO"},
    },
}

# --- The cluster gateway ---------------------------------------------------------------------
if PORTAL_CLUSTER == "simulated":
    # The simulated cluster keeps its objects in this database; a site on a real cluster has no such tables.
    INSTALLED_APPS.append("portal.kube.simulated")
# Last of all: it checks, once every other app is ready, that each required hook between apps is filled.
INSTALLED_APPS.append("portal.hooks")
# Seeds the simulated cluster's watch streams, so which kind's events arrive first when several
# change at once varies as on a real cluster, yet the same seed gives the same interleaving again.
SIMULATED_WATCH_SEED = config.text("SIMULATED_WATCH_SEED")
KUBECONFIG = config.text("KUBECONFIG")
KUBE_CONTEXT = config.text("KUBE_CONTEXT")
KUBE_IN_CLUSTER = config.boolean("KUBE_IN_CLUSTER")
KUBE_QPS = config.number("KUBE_QPS")
KUBE_BURST = config.whole("KUBE_BURST")
# The queue backend that keeps teams' quota and admits workloads (tenants/queueing/): kueue, the
# only one so far. Another value stops the start with a sentence (tenants.apps).
PORTAL_QUEUE_BACKEND = config.text("PORTAL_QUEUE_BACKEND")
# The Kueue cohort every team's ClusterQueue joins, so idle quota can be borrowed across teams.
PORTAL_COHORT = config.text("PORTAL_COHORT")
# Put before every team's namespace and ClusterQueue name ("gpu-" makes team vision's namespace
# gpu-vision), so team slugs never collide with namespaces the cluster already has. Empty keeps
# the names of existing teams; changing it later moves every team to new names.
PORTAL_NAMESPACE_PREFIX = config.text("PORTAL_NAMESPACE_PREFIX")
if PORTAL_NAMESPACE_PREFIX and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,30})", PORTAL_NAMESPACE_PREFIX):
    raise ImproperlyConfigured(
        f"PORTAL_NAMESPACE_PREFIX “{PORTAL_NAMESPACE_PREFIX}” must be at most 31 lowercase letters, digits and hyphens, "
        "starting with a letter or digit (it begins a Kubernetes namespace name)."
    )
# Namespace of the ingress controller: team NetworkPolicies let it reach inference and notebook pods.
PORTAL_INGRESS_NAMESPACE = config.text("PORTAL_INGRESS_NAMESPACE")
# How the API server names people who sign in to it with OIDC: these must equal its
# --oidc-username-claim and --oidc-username-prefix (and --oidc-issuer-url), or the team
# RoleBinding, which grants members read access to their pods and logs, names nobody. Only SSO
# accounts are bound, by the claim's value in their identity; local accounts have no cluster
# identity. "sub" (the default) is the provider's subject, which it never reassigns; "email" is
# the address the provider last gave. PORTAL_CLUSTER_USER_PREFIX is the prefix's former name.
KUBE_OIDC_USERNAME_CLAIM = config.text("KUBE_OIDC_USERNAME_CLAIM")
if KUBE_OIDC_USERNAME_CLAIM not in ("sub", "email"):
    raise ImproperlyConfigured(
        f"KUBE_OIDC_USERNAME_CLAIM is “sub” or “email”, the claims the portal knows of each SSO account; "
        f"it is {KUBE_OIDC_USERNAME_CLAIM!r}."
    )
# "-" means no prefix, as it does for the API server.
KUBE_OIDC_USERNAME_PREFIX = config.text("KUBE_OIDC_USERNAME_PREFIX", config.text("PORTAL_CLUSTER_USER_PREFIX") or "oidc:")
if KUBE_OIDC_USERNAME_PREFIX == "-":
    KUBE_OIDC_USERNAME_PREFIX = ""
# Only identities of this issuer are bound (the API server trusts one); empty binds every SSO account.
KUBE_OIDC_ISSUER = config.text("KUBE_OIDC_ISSUER", config.text("OIDC_OP_ISSUER"))
# The ClusterRole that RoleBinding binds members to. The portal can bind only a role whose every
# rule it holds: the Helm chart installs a read-only one (pods, logs, its workloads) and sets this;
# `view` suits a portal whose service account holds all of `view`. Changing it recreates the bindings.
PORTAL_MEMBER_CLUSTER_ROLE = config.text("PORTAL_MEMBER_CLUSTER_ROLE")


def service_account_namespace(path: str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace") -> str:
    """The namespace this process runs in, when it runs in a pod; else empty."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


# Team NetworkPolicies. The portal's pods (these labels in this namespace) may reach notebooks'
# HTTP port, for the idle check. The namespace defaults to the one the portal's pod runs in.
PORTAL_NAMESPACE = config.namespace("PORTAL_NAMESPACE", service_account_namespace() or "gpu-portal")
PORTAL_POD_LABELS = config.labels("PORTAL_POD_LABELS")

# Namespaced reads (the chart's rbac.namespacedReads): the portal's ClusterRole holds no read of
# pods, logs, events or data volumes and nothing of Secrets; in each team namespace it makes, the
# portal binds its own ServiceAccount (PORTAL_SERVICE_ACCOUNT, in PORTAL_NAMESPACE) to
# PORTAL_TEAM_NAMESPACE_ROLE, and it lists and watches pods namespace by namespace.
PORTAL_NAMESPACED_READS = config.boolean("PORTAL_NAMESPACED_READS")
PORTAL_TEAM_NAMESPACE_ROLE = config.text("PORTAL_TEAM_NAMESPACE_ROLE")
PORTAL_SERVICE_ACCOUNT = config.text("PORTAL_SERVICE_ACCOUNT")
if PORTAL_NAMESPACED_READS and not (PORTAL_TEAM_NAMESPACE_ROLE and PORTAL_SERVICE_ACCOUNT):
    raise ImproperlyConfigured("PORTAL_NAMESPACED_READS needs PORTAL_TEAM_NAMESPACE_ROLE and PORTAL_SERVICE_ACCOUNT: "
                               "the ClusterRole and the ServiceAccount the portal binds in each team namespace.")

# Leader election (portal/leader.py) through Leases in the pod's namespace, as client-go's: the
# watch sync elects one writer when PORTAL_LEADER_ELECTION is on (several replicas); run_beat
# always holds its Lease. A leader that cannot renew for the renew deadline stops writing, and
# the others wait the lease duration from the last renewal they saw before taking over.
PORTAL_LEADER_ELECTION = config.boolean("PORTAL_LEADER_ELECTION")
# How often the watcher (its leader, when elected) compares every team's objects with the store
# its watches keep and repairs what differs; 0 leaves it to the worker's pass every 10 minutes.
PORTAL_TEAM_PASS_SECONDS = config.number("PORTAL_TEAM_PASS_SECONDS")
if PORTAL_TEAM_PASS_SECONDS < 0:
    raise ImproperlyConfigured(f"PORTAL_TEAM_PASS_SECONDS is {PORTAL_TEAM_PASS_SECONDS}: seconds, or 0 for none.")
POD_NAME = config.text("POD_NAME")
POD_NAMESPACE = config.namespace("POD_NAMESPACE", PORTAL_NAMESPACE)
PORTAL_LEADER_LEASE = config.text("PORTAL_LEADER_LEASE")
PORTAL_BEAT_LEASE = config.text("PORTAL_BEAT_LEASE")
PORTAL_LEASE_DURATION_SECONDS = config.whole("PORTAL_LEASE_DURATION_SECONDS")
PORTAL_LEASE_RENEW_DEADLINE_SECONDS = config.number("PORTAL_LEASE_RENEW_DEADLINE_SECONDS")
PORTAL_LEASE_RETRY_PERIOD_SECONDS = config.number("PORTAL_LEASE_RETRY_PERIOD_SECONDS")
for _lease in (PORTAL_LEADER_LEASE, PORTAL_BEAT_LEASE):
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", _lease):
        raise ImproperlyConfigured(f"“{_lease}” is not a Lease name (lowercase letters, digits, '-' and '.').")
if not (PORTAL_LEASE_DURATION_SECONDS > PORTAL_LEASE_RENEW_DEADLINE_SECONDS > 1.2 * PORTAL_LEASE_RETRY_PERIOD_SECONDS > 0):
    raise ImproperlyConfigured(
        "Leader election needs PORTAL_LEASE_DURATION_SECONDS > PORTAL_LEASE_RENEW_DEADLINE_SECONDS > 1.2 × "
        f"PORTAL_LEASE_RETRY_PERIOD_SECONDS > 0; they are {PORTAL_LEASE_DURATION_SECONDS}, "
        f"{PORTAL_LEASE_RENEW_DEADLINE_SECONDS} and {PORTAL_LEASE_RETRY_PERIOD_SECONDS}."
    )
# Team pods reach only DNS (these pods in this namespace, UDP and TCP 53), each other, and what
# follows: the internet when PORTAL_EGRESS_INTERNET is "on" (private ranges left out while
# PORTAL_EGRESS_EXCLUDE_PRIVATE is on), and extra networks and namespaces, e.g. a registry
# mirror or object storage. The cloud metadata address is never reachable: a network that
# contains it gets it cut out, and one inside it stops the start (tenants/apps.py).
PORTAL_DNS_NAMESPACE = config.namespace("PORTAL_DNS_NAMESPACE")
PORTAL_DNS_POD_LABELS = config.labels("PORTAL_DNS_POD_LABELS")
PORTAL_DEVICE_PLUGIN_POD_LABELS = config.labels("PORTAL_DEVICE_PLUGIN_POD_LABELS")
PORTAL_GPU_EXPORTER_POD_LABELS = config.labels("PORTAL_GPU_EXPORTER_POD_LABELS")
PORTAL_EGRESS_INTERNET = config.text("PORTAL_EGRESS_INTERNET").lower()
if PORTAL_EGRESS_INTERNET not in {"off", "on"}:
    raise ImproperlyConfigured(f"PORTAL_EGRESS_INTERNET must be “off” or “on”; it is “{PORTAL_EGRESS_INTERNET}”.")
PORTAL_EGRESS_EXCLUDE_PRIVATE = config.boolean("PORTAL_EGRESS_EXCLUDE_PRIVATE")
PORTAL_EGRESS_ALLOW_CIDRS = config.items("PORTAL_EGRESS_ALLOW_CIDRS")
PORTAL_EGRESS_ALLOW_NAMESPACES = [config.parse_namespace("PORTAL_EGRESS_ALLOW_NAMESPACES", name)
                                  for name in config.items("PORTAL_EGRESS_ALLOW_NAMESPACES")]
# Inference servers and notebooks get an Ingress at <name>-<team>.<domain> when this is set.
PORTAL_INGRESS_DOMAIN = config.text("PORTAL_INGRESS_DOMAIN")
# The IngressClass of those Ingresses: the portal's gate in front of them speaks ingress-nginx's
# external authentication (auth-url, auth-signin).
PORTAL_INGRESS_CLASS = config.text("PORTAL_INGRESS_CLASS")
# TLS for them: the name of a Secret holding a wildcard certificate for *.<domain>, present in
# every team's namespace, or a cert-manager ClusterIssuer that issues one per host. Without
# either, they answer plain HTTP and the pages say http://, never https://.
PORTAL_INGRESS_TLS_SECRET = config.text("PORTAL_INGRESS_TLS_SECRET")
PORTAL_INGRESS_CLUSTER_ISSUER = config.text("PORTAL_INGRESS_CLUSTER_ISSUER")
if PORTAL_INGRESS_TLS_SECRET and PORTAL_INGRESS_CLUSTER_ISSUER:
    raise ImproperlyConfigured(
        "Set PORTAL_INGRESS_TLS_SECRET (a wildcard certificate) or PORTAL_INGRESS_CLUSTER_ISSUER (cert-manager), not both."
    )
# Where the ingress controller asks the portal whether a request may reach a workload: the
# portal's address as the controller sees it, e.g. its Service inside the cluster. Its host must
# be in ALLOWED_HOSTS, and it is not redirected to HTTPS (the controller's call stays inside).
PORTAL_INGRESS_AUTH_URL = config.text("PORTAL_INGRESS_AUTH_URL", SITE_URL).rstrip("/")
if PRODUCTION:
    SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^auth/workloads/", r"^auth/gateway(/|$)"]
# The controller cannot follow a redirect to the identity provider: the gate answers, never redirects.
OIDC_EXEMPT_URLS = [re.compile(r"^/auth/workloads/"), re.compile(r"^/auth/gateway(/|$)")]
# Gateway API instead of Ingresses (jobs/manifests.py's route_object, jobs/access.py's gateway gate).
PORTAL_ENDPOINT_ROUTES = config.text("PORTAL_ENDPOINT_ROUTES").lower()
if PORTAL_ENDPOINT_ROUTES not in {"ingress", "gateway"}:
    raise ImproperlyConfigured(f"PORTAL_ENDPOINT_ROUTES must be “ingress” or “gateway”; it is “{PORTAL_ENDPOINT_ROUTES}”.")
PORTAL_GATEWAY = config.gateway_reference("PORTAL_GATEWAY")
PORTAL_GATEWAY_AUTH_SERVICE = config.service_reference("PORTAL_GATEWAY_AUTH_SERVICE")
PORTAL_GATEWAY_TLS = config.boolean("PORTAL_GATEWAY_TLS")
if PORTAL_ENDPOINT_ROUTES == "gateway" and PORTAL_INGRESS_DOMAIN and not PORTAL_GATEWAY:
    raise ImproperlyConfigured("PORTAL_ENDPOINT_ROUTES is “gateway”: set PORTAL_GATEWAY to the Gateway the routes attach "
                               "to, as namespace/name or namespace/name/listener.")
# A notebook's token is derived from this key and the workload (HMAC), so the database keeps only
# its hash; whoever holds the key could mint sessions anyway, so SECRET_KEY is its default.
PORTAL_NOTEBOOK_TOKEN_KEY = config.text("PORTAL_NOTEBOOK_TOKEN_KEY", SECRET_KEY)
# Annotations every workload pod gets, set by the site, never by users: the simulated cluster
# and KWOK read how long a fake pod runs from them (demo and test clusters only).
PORTAL_POD_ANNOTATIONS: dict[str, str] = config.json_object("PORTAL_POD_ANNOTATIONS")
# Where the portal asks a notebook server how long it has been idle (Jupyter's /api/status),
# reachable from the portal's own pods through the notebook's Service.
PORTAL_NOTEBOOK_STATUS_URL = config.text("PORTAL_NOTEBOOK_STATUS_URL")
PORTAL_WORKSPACE_STATUS_URL = config.text("PORTAL_WORKSPACE_STATUS_URL")
# Where the portal asks an inference server its page's Try it questions (jobs/try_it.py).
PORTAL_INFERENCE_URL = config.text("PORTAL_INFERENCE_URL")
