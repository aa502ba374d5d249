from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from billing.budgets import api as budgets_api
from billing.budgets import views as budgets_views
from billing.rates import api as rates_api
from billing.rates import views as rates_views
from billing.statements import api as statements_api
from billing.statements import views as statements_views
from billing.usage import api as usage_api
from billing.usage import views as usage_views

app_name = "billing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("me/", usage_views.my_usage, name="my-usage"),
    path("teams/<slug:slug>/", usage_views.team_usage, name="team-usage"),
    path("teams/<slug:slug>/efficiency/", usage_views.team_efficiency, name="team-efficiency"),
    path("finance/", usage_views.finance_overview, name="finance-overview"),
    path("rates/", rates_views.rate_card, name="rate-card"),
    path("rates/idle/<slug:slug>/", rates_views.idle_policy_set, name="idle-policy-set"),
    path("budgets/", budgets_views.budget_list, name="budget-list"),
    path("budgets/<slug:slug>/", budgets_views.budget_detail, name="budget-detail"),
    path("budgets/<slug:slug>/bar/", budgets_views.budget_bar, name="budget-bar"),
    path("alert-emails/", budgets_views.alert_email, name="alert-email"),
    path("statements/", statements_views.statement_list, name="statement-list"),
    path("statements/close/", statements_views.statement_close, name="statement-close"),
    path("statements/<str:month>/", statements_views.statement_detail, name="statement-detail"),
    path("statements/<str:month>/adjustments/", statements_views.adjustment_add, name="adjustment-add"),
    path("statements/<str:month>/csv/", statements_views.statement_csv, name="statement-csv"),
    path("statements/<str:month>/pdf/", statements_views.statement_pdf, name="statement-pdf"),
]

# The billing API, mounted under /api/billing/ by portal/urls.py.
api_router = DefaultRouter(trailing_slash=True)
api_router.include_root_view = False
budgets_api.register(api_router)
statements_api.register(api_router)
api_urlpatterns: list[URLPattern | URLResolver] = [
    path("usage/", usage_api.UsageView.as_view(), name="usage"),
    path("overview/", usage_api.OverviewView.as_view(), name="overview"),
    path("rates/", rates_api.RateListView.as_view(), name="rates"),
    path("idle-policies/", rates_api.IdlePolicyListView.as_view(), name="idle-policies"),
    *api_router.urls,
]
