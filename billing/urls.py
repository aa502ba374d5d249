"""Billing's pages (mounted at /billing/) and API (mounted at /api/billing/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from billing import api_budgets, budget_views

app_name = "billing"

urlpatterns = [
    path("budgets/", budget_views.budget_list, name="budget-list"),
    path("budgets/<slug:slug>/", budget_views.budget_detail, name="budget-detail"),
    path("budgets/<slug:slug>/bar/", budget_views.budget_bar, name="budget-bar"),
    path("alert-emails/", budget_views.alert_email, name="alert-email"),
]

api_router = DefaultRouter(trailing_slash=True)
api_budgets.register(api_router)
api_urlpatterns = api_router.urls
