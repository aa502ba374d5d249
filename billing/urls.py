from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from billing import api_budgets, api_statements, api_usage, budget_views, statement_views, views

app_name = "billing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("me/", views.my_usage, name="my-usage"),
    path("teams/<slug:slug>/", views.team_usage, name="team-usage"),
    path("teams/<slug:slug>/efficiency/", views.team_efficiency, name="team-efficiency"),
    path("finance/", views.finance_overview, name="finance-overview"),
    path("rates/", views.rate_card, name="rate-card"),
    path("rates/idle/<slug:slug>/", views.idle_policy_set, name="idle-policy-set"),
    path("budgets/", budget_views.budget_list, name="budget-list"),
    path("budgets/<slug:slug>/", budget_views.budget_detail, name="budget-detail"),
    path("budgets/<slug:slug>/bar/", budget_views.budget_bar, name="budget-bar"),
    path("alert-emails/", budget_views.alert_email, name="alert-email"),
    path("statements/", statement_views.statement_list, name="statement-list"),
    path("statements/close/", statement_views.statement_close, name="statement-close"),
    path("statements/<str:month>/", statement_views.statement_detail, name="statement-detail"),
    path("statements/<str:month>/adjustments/", statement_views.adjustment_add, name="adjustment-add"),
    path("statements/<str:month>/csv/", statement_views.statement_csv, name="statement-csv"),
    path("statements/<str:month>/pdf/", statement_views.statement_pdf, name="statement-pdf"),
]

# The billing API, mounted under /api/billing/ by portal/urls.py.
api_router = DefaultRouter(trailing_slash=True)
api_router.include_root_view = False
api_budgets.register(api_router)
api_statements.register(api_router)
api_urlpatterns: list[URLPattern | URLResolver] = [
    path("usage/", api_usage.UsageView.as_view(), name="usage"),
    path("overview/", api_usage.OverviewView.as_view(), name="overview"),
    path("rates/", api_usage.RateListView.as_view(), name="rates"),
    path("idle-policies/", api_usage.IdlePolicyListView.as_view(), name="idle-policies"),
    *api_router.urls,
]
