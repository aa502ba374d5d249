from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from billing import api_budgets, api_usage, budget_views, views

app_name = "billing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("me/", views.my_usage, name="my-usage"),
    path("teams/<slug:slug>/", views.team_usage, name="team-usage"),
    path("finance/", views.finance_overview, name="finance-overview"),
    path("rates/", views.rate_card, name="rate-card"),
    path("budgets/", budget_views.budget_list, name="budget-list"),
    path("budgets/<slug:slug>/", budget_views.budget_detail, name="budget-detail"),
    path("budgets/<slug:slug>/bar/", budget_views.budget_bar, name="budget-bar"),
    path("alert-emails/", budget_views.alert_email, name="alert-email"),
]

budget_router = DefaultRouter(trailing_slash=True)
budget_router.include_root_view = False
api_budgets.register(budget_router)

# Mounted under /api/billing/ by portal/urls.py.
api_urlpatterns: list[URLPattern | URLResolver] = [
    path("usage/", api_usage.UsageView.as_view(), name="usage"),
    path("rates/", api_usage.RateListView.as_view(), name="rates"),
    *budget_router.urls,
]
