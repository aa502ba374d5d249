from django.urls import URLPattern, path

from billing import views

app_name = "billing"
urlpatterns: list[URLPattern] = [
    path("me/", views.my_usage, name="my-usage"),
    path("teams/<slug:slug>/", views.team_usage, name="team-usage"),
    path("finance/", views.finance_overview, name="finance-overview"),
    path("rates/", views.rate_card, name="rate-card"),
]
