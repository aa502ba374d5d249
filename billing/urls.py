from django.urls import URLPattern, path

from billing import api_usage, views

app_name = "billing"
urlpatterns: list[URLPattern] = [
    path("me/", views.my_usage, name="my-usage"),
    path("teams/<slug:slug>/", views.team_usage, name="team-usage"),
    path("finance/", views.finance_overview, name="finance-overview"),
    path("rates/", views.rate_card, name="rate-card"),
]

# Mounted under /api/billing/ by portal/urls.py.
api_urlpatterns: list[URLPattern] = [
    path("usage/", api_usage.UsageView.as_view(), name="usage"),
    path("rates/", api_usage.RateListView.as_view(), name="rates"),
]
