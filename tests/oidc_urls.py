from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [*portal_urlpatterns, path("oidc/", include("mozilla_django_oidc.urls"))]
