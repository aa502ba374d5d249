"""A team's credentials on both clusters: each kind is a Secret of the type its consumer reads, which
the real API server validates (a deploy key's needs `ssh-privatekey`, a registry login's a
`.dockerconfigjson` that is JSON); rotating drops a value no longer given (server-side apply
removes the fields the portal owned and no longer sends); a launch naming all three has its pod
created under the namespace's Pod Security `restricted`, with the key as files, the S3 key as
variables and the login as its image pull secret; deletion takes the Secret away. The Secrets are
read back as the cluster's administrator: the portal's own account may write Secrets, never read
them (run as that account by tests/contract/test_chart_contract.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from jobs import credentials, manifests, services
from jobs.models import TeamCredential, Workload, WorkloadKind
from portal.kube import ObjectRef, gateway
from tests.contract.conftest import ClusterUnderTest
from tests.contract.scenarios import HOLD, launch

pytestmark = pytest.mark.django_db

KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "-----END OPENSSH PRIVATE KEY-----\n")


def _secret(cluster: ClusterUnderTest, credential: TeamCredential) -> dict[str, Any] | None:
    """The credential's Secret as the cluster's administrator reads it."""
    if cluster.control_plane is None:
        return gateway().get(ObjectRef("v1", "Secret", credential.secret_name, credential.team.namespace))
    api = k8s_config.new_client_from_config(str(cluster.control_plane.kubeconfig_path))
    try:
        secret = k8s_client.CoreV1Api(api).read_namespaced_secret(credential.secret_name, credential.team.namespace)
    except k8s_client.ApiException as error:
        if error.status == 404:
            return None
        raise
    body: dict[str, Any] = api.sanitize_for_serialization(secret)
    return body


def _values(secret: dict[str, Any] | None) -> dict[str, str]:
    assert secret is not None
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


def test_credentials_are_kept_rotated_mounted_and_deleted_as_the_teams_secrets(
        cluster, site, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("keys", gpus=1)
    member = team.memberships.get().user
    s3 = credentials.credential_create(actor=member, team=team, name="lake", kind="s3", values={
        "access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "first/secret", "endpoint": "https://minio.test"})
    key = credentials.credential_create(actor=member, team=team, name="repo", kind="git-ssh", values={"private_key": KEY})
    login = credentials.credential_create(actor=member, team=team, name="pull", kind="registry", values={
        "server": "registry.example.com", "username": "robot", "password": "t0ken"})

    assert (_secret(cluster, s3) or {})["type"] == "Opaque"
    assert _values(_secret(cluster, key)) == {"ssh-privatekey": KEY}
    assert (_secret(cluster, key) or {})["type"] == "kubernetes.io/ssh-auth"
    auths = json.loads(_values(_secret(cluster, login))[".dockerconfigjson"])["auths"]
    assert auths["registry.example.com"]["username"] == "robot"

    credentials.credential_rotate(actor=member, credential=s3, values={"access_key_id": "AKIAROTATED00001",
                                                                       "secret_access_key": "second/secret"})
    assert _values(_secret(cluster, s3)) == {"AWS_ACCESS_KEY_ID": "AKIAROTATED00001", "AWS_SECRET_ACCESS_KEY": "second/secret"}

    template = services.template_create(
        user=site.admin, slug=f"keys-{site.flavor.slug}"[:40], name="With keys", kind=WorkloadKind.TRAINING,
        flavors=[site.flavor], image="registry.example.com/ml/runtime:1", command=["python"], max_units=1,
        default_cpu=1, default_memory_gib=1, parameters=[
            {"name": "bucket", "type": "credential", "credential_kind": "s3"},
            {"name": "deploy_key", "type": "credential", "credential_kind": "git-ssh", "mount_path": "/keys"},
            {"name": "pull", "type": "credential", "credential_kind": "registry"}])
    workload = launch(team, member, template, site.flavor, django_capture_on_commit_callbacks, units=1,
                      parameters={"bucket": "lake", "deploy_key": "repo", "pull": "pull"})
    assert workload.phase != Workload.Phase.FAILED, workload.reason

    def pods() -> list[dict[str, Any]]:
        return gateway().list("v1", "Pod", namespace=team.namespace, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]

    (pod,) = cluster.wait_for(pods, what="the pod mounting three credentials to be created")
    spec = pod["spec"]
    assert spec["containers"][0]["envFrom"] == [{"secretRef": {"name": s3.secret_name}}]
    assert {"name": "key-1", "secret": {"secretName": key.secret_name, "defaultMode": 0o400}} in spec["volumes"]
    assert {"name": "key-1", "mountPath": "/keys", "readOnly": True} in spec["containers"][0]["volumeMounts"]
    assert spec["imagePullSecrets"] == [{"name": login.secret_name}]

    other = credentials.credential_create(actor=member, team=team, name="spare", kind="s3", values={
        "access_key_id": "AKIASPARE0000001", "secret_access_key": "spare"})
    credentials.credential_delete(actor=member, credential=other)
    assert _secret(cluster, other) is None and not TeamCredential.objects.filter(name="spare").exists()
    assert _secret(cluster, s3) is not None  # the others stay
