from django.urls import URLPattern, path, re_path

from jobs import credential_views, platform_views, template_views, views, volume_views

app_name = "jobs"
urlpatterns: list[URLPattern] = [
    path("templates/", views.template_list, name="template-list"),
    # The platform admin's idle policy, without the Django admin.
    path("platform/idle-policy/", platform_views.idle_defaults_edit, name="idle-defaults"),
    path("platform/nodes/<str:name>/drain/", platform_views.node_drain, name="node-drain"),
    path("templates/new/", template_views.template_create, name="template-create"),
    path("templates/<int:pk>/edit/", template_views.template_edit, name="template-edit"),
    path("launch/", views.workload_launch, name="workload-launch"),
    path("launch/hint/", views.launch_hint, name="launch-hint"),
    path("workloads/", views.workload_list, name="workload-list"),
    path("workloads/mine/", views.my_workloads, name="my-workloads"),
    path("teams/<slug:slug>/gpu-use/", views.team_gpu_use, name="team-gpu-use"),
    path("teams/<slug:slug>/volumes/", volume_views.team_volumes, name="team-volumes"),
    path("teams/<slug:slug>/volumes/new/", volume_views.volume_create, name="volume-create"),
    path("teams/<slug:slug>/volumes/<slug:name>/resize/", volume_views.volume_resize, name="volume-resize"),
    path("teams/<slug:slug>/volumes/<slug:name>/delete/", volume_views.volume_delete, name="volume-delete"),
    path("teams/<slug:slug>/credentials/", credential_views.team_credentials, name="team-credentials"),
    path("teams/<slug:slug>/credentials/new/", credential_views.credential_create, name="credential-create"),
    path("teams/<slug:slug>/credentials/<slug:name>/rotate/", credential_views.credential_rotate, name="credential-rotate"),
    path("teams/<slug:slug>/credentials/<slug:name>/delete/", credential_views.credential_delete, name="credential-delete"),
    path("workloads/notifications/", views.notification_preferences, name="notification-preferences"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload-detail"),
    path("workloads/<int:pk>/live/", views.workload_live, name="workload-live"),
    path("workloads/<int:pk>/logs/", views.workload_logs, name="workload-logs"),
    path("workloads/<int:pk>/telemetry/", views.workload_telemetry, name="workload-telemetry"),
    path("workloads/<int:pk>/logs/download/", views.workload_logs_download, name="workload-logs-download"),
    path("workloads/<int:pk>/stop/", views.workload_stop, name="workload-stop"),
    path("workloads/<int:pk>/keep-running/", views.workload_keep_running, name="workload-keep-running"),

    path("workloads/<int:pk>/scale/", views.workload_scale, name="workload-scale"),
    path("workloads/<int:pk>/relaunch/", views.workload_relaunch, name="workload-relaunch"),
    path("workloads/<int:pk>/open/", views.workload_open, name="workload-open"),
    path("workloads/<int:pk>/try/", views.workload_try, name="workload-try"),
    path("notebooks/mine/", views.my_notebook, name="my-notebook"),
    path("workloads/<int:pk>/keys/", views.endpoint_key_create, name="endpoint-key-create"),
    path("workloads/<int:pk>/keys/<int:key_pk>/revoke/", views.endpoint_key_revoke, name="endpoint-key-revoke"),
    path("workloads/<int:pk>/notebook-token/", views.notebook_token, name="notebook-token"),
    path("auth/workloads/<int:pk>/", views.workload_gate, name="workload-gate"),
    # A gateway adds the request's own path (any path) after the prefix.
    re_path(r"^auth/gateway(?:/.*)?$", views.workload_gateway_gate, name="workload-gateway-gate"),
]
