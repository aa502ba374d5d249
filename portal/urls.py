"""The composition root: the one module that knows every app's URLs."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from billing import urls as billing_urls
from jobs import api as jobs_api
from portal import api as portal_api
from portal import views
from portal.security import csp_relaxed
from tenants import api as tenants_api
from tenants import nodes_api, people_api

router = DefaultRouter()
portal_api.register(router)
tenants_api.register(router)
people_api.register(router)
nodes_api.register(router)
jobs_api.register(router)

handler404 = "portal.views.not_found"

urlpatterns = [
    path("", include("jobs.urls")),
    path("", include("tenants.urls")),
    path("billing/", include("billing.urls")),
    path("api/billing/", include((billing_urls.api_urlpatterns, "billing-api"))),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", views.SignOutView.as_view(), name="logout"),
    path("tokens/", views.api_tokens, name="api-tokens"),
    path("tokens/<int:pk>/revoke/", views.api_token_revoke, name="api-token-revoke"),
    path("notifications/", views.notification_list, name="notifications"),
    path("notifications/read/", views.notifications_read, name="notifications-read"),
    path("notifications/bell/", views.notification_bell, name="notification-bell"),
    path("notifications/<int:pk>/", views.notification_open, name="notification-open"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include(router.urls)),
    # The schema answers people signed in, by session or token (SPECTACULAR_SETTINGS); its pages send
    # someone signed out to the login page and back.
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI's start script comes from its own URL (the split view), so scripts stay strict;
    # its page and Redoc's bring <style> elements, and Redoc searches in a worker made from a blob.
    path(
        "api/docs/",
        login_required(csp_relaxed(style_src=["'unsafe-inline'"])(SpectacularSwaggerSplitView.as_view(url_name="api-schema"))),
        name="api-docs",
    ),
    path(
        "api/redoc/",
        login_required(csp_relaxed(style_src=["'unsafe-inline'"], worker_src=["blob:"])(
            SpectacularRedocView.as_view(url_name="api-schema")
        )),
        name="api-redoc",
    ),
]

# 403.html and 404.html are found by Django's own handlers, which render them with the request;
# the 500 handler is the portal's, so that page keeps its navigation too.
handler500 = "portal.views.server_error"

if settings.OIDC_ENABLED:
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))
