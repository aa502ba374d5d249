from django.urls import path

app_name = "tenants"
urlpatterns: list = []
