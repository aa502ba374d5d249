from django.urls import URLPattern, path

from tenants import people_views, platform_views, views

app_name = "tenants"
urlpatterns: list[URLPattern] = [
    path("", views.dashboard, name="dashboard"),
    path("start/", views.landing, name="landing"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("teams/<slug:slug>/requests/", views.team_requests, name="team-requests"),
    path("teams/<slug:slug>/audit/", views.team_audit, name="team-audit"),
    path("teams/<slug:slug>/cluster/", views.team_cluster, name="team-cluster"),
    path("capacity/", views.cluster_capacity, name="capacity"),
    path("teams/<slug:slug>/members/add/", views.membership_add, name="membership-add"),
    path("teams/<slug:slug>/person-limit/", views.team_person_limit, name="team-person-limit"),
    path("teams/<slug:slug>/members/<int:pk>/role/", views.membership_role, name="membership-role"),
    path("teams/<slug:slug>/members/<int:pk>/remove/", views.membership_remove, name="membership-remove"),
    path("requests/", views.quota_request_list, name="quota-request-list"),
    path("requests/new/", views.quota_request_create, name="quota-request-create"),
    path("requests/preview/", views.quota_preview, name="quota-preview"),
    path("requests/<int:pk>/", views.quota_request_detail, name="quota-request-detail"),
    path("requests/<int:pk>/approve/", views.quota_request_approve, name="quota-request-approve"),
    path("requests/<int:pk>/reject/", views.quota_request_reject, name="quota-request-reject"),
    path("requests/<int:pk>/cancel/", views.quota_request_cancel, name="quota-request-cancel"),
    path("approvals/", views.approvals, name="approvals"),
    path("audit/", views.audit, name="audit"),
    # The platform admin's pages: teams and the GPU catalog without the Django admin.
    path("platform/teams/new/", platform_views.team_create, name="team-create"),
    path("platform/teams/<slug:slug>/edit/", platform_views.team_edit, name="team-edit"),
    path("platform/teams/<slug:slug>/delete/", platform_views.team_delete, name="team-delete"),
    path("platform/catalog/", platform_views.flavor_list, name="flavor-list"),
    path("platform/catalog/new/", platform_views.flavor_create, name="flavor-create"),
    path("platform/catalog/<slug:slug>/", platform_views.flavor_edit, name="flavor-edit"),
    path("platform/nodes/", platform_views.node_list, name="node-list"),
    path("platform/nodes/<str:name>/", platform_views.node_detail, name="node-detail"),
    path("platform/nodes/<str:name>/cordon/", platform_views.node_cordon, name="node-cordon"),
    path("platform/people/", people_views.person_list, name="person-list"),
    path("platform/people/<int:pk>/", people_views.person_detail, name="person-detail"),
    path("platform/people/<int:pk>/role/", people_views.person_role, name="person-role"),
    path("platform/people/<int:pk>/active/", people_views.person_active, name="person-active"),
    path("platform/people/<int:pk>/tokens/<int:token_pk>/revoke/", people_views.person_token_revoke,
         name="person-token-revoke"),
]
