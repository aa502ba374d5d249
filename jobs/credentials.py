"""A team's credentials: S3 keys, git deploy keys and registry logins that members keep for the team
and launches mount by name, where a template's parameter of type credential asks for one.

Each is a Secret in the team's namespace. Its values are written once, into the Secret, and never
kept by the portal nor shown again: the portal may write Secrets, never read them (its RBAC says
so). A TeamCredential row holds the name, the kind and a hint that tells credentials apart; the
Secret's own name has a random part no one else chooses, which is what makes deleting it by name
touch only the portal's own. Rotating writes new values over the old ones in place: pods mounting
it as files see them within a minute, pods reading it as variables at their next start.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from base64 import b64encode
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from jobs import selectors
from jobs.models import TeamCredential
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.kube import KubeError, ObjectRef, gateway
from portal.models import User
from tenants import desired
from tenants import manifests as tenant_manifests
from tenants.models import Team

log = logging.getLogger(__name__)

Kind = TeamCredential.Kind
# What each kind is given, by field name, and which of those it needs.
FIELDS: dict[str, tuple[str, ...]] = {
    Kind.S3: ("access_key_id", "secret_access_key", "endpoint", "region"),
    Kind.GIT_SSH: ("private_key", "known_hosts"),
    Kind.REGISTRY: ("server", "username", "password"),
}
REQUIRED: dict[str, tuple[str, ...]] = {
    Kind.S3: ("access_key_id", "secret_access_key"),
    Kind.GIT_SSH: ("private_key",),
    Kind.REGISTRY: ("server", "username", "password"),
}
LABELS = {
    "access_key_id": "Access key ID", "secret_access_key": "Secret access key", "endpoint": "Endpoint URL",
    "region": "Region", "private_key": "Private key", "known_hosts": "Known hosts", "server": "Registry",
    "username": "User name", "password": "Password or token",
}
# A call that made no Secret within this long never will: its values are gone, so the repair pass
# deletes whatever part of it the cluster may hold, and the row.
ABANDONED_AFTER = timedelta(minutes=10)

_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")  # ASCII without spaces or control characters
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_HOST = re.compile(r"^(?=.{1,253}(?::|$))[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?$")
_KEY_HEADER = re.compile(r"^-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MOST = {"access_key_id": 128, "secret_access_key": 256, "endpoint": 253, "region": 32, "private_key": 16 * 1024,
        "known_hosts": 64 * 1024, "server": 253, "username": 255, "password": 4096}


@dataclass(frozen=True)
class CredentialRow:
    credential: TeamCredential
    used_by: tuple[str, ...] = ()

    @property
    def deletable(self) -> bool:
        return not self.used_by and self.credential.state == TeamCredential.State.ACTIVE


def _problem(field: str, message: str) -> DomainError:
    return DomainError(f"{LABELS[field]}: {message}", field=field)


def secret_data(kind: str, given: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], str]:
    """What the Secret of a credential of that kind holds, key by key, and the hint shown for it:
    the given values checked, each refusal naming its field in words."""
    if kind not in FIELDS:
        raise DomainError(f"“{kind}” is not a kind of credential; use one of {', '.join(FIELDS)}.", field="kind")
    other = sorted(field for field, value in given.items() if value and field not in FIELDS[kind])
    if other:
        raise DomainError(f"{Kind(kind).label} takes {', '.join(FIELDS[kind])}; not {', '.join(other)}.", field=other[0])
    values = {field: (given.get(field) or "") for field in FIELDS[kind]}
    for field, value in values.items():
        if not isinstance(value, str):
            raise _problem(field, "must be text.")
        if field in REQUIRED[kind] and not value.strip():
            raise _problem(field, "is needed.")
        if len(value) > MOST[field]:
            raise _problem(field, f"may be at most {MOST[field]:,} characters, not {len(value):,}.")
    if kind == Kind.S3:
        return _s3(values)
    if kind == Kind.GIT_SSH:
        return _git_ssh(values)
    return _registry(values)


def _s3(values: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], str]:
    key, secret = values["access_key_id"].strip(), values["secret_access_key"].strip()
    endpoint, region = values["endpoint"].strip(), values["region"].strip()
    for field, value in (("access_key_id", key), ("secret_access_key", secret)):
        if not _PRINTABLE.match(value):
            raise _problem(field, "holds spaces or characters other than printable ASCII; paste it as given.")
    if endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment or "@" in parts.netloc:
            raise _problem("endpoint", "must be an http(s) URL without user, query or fragment, e.g. https://s3.example.com.")
    if region and not _REGION.match(region):
        raise _problem("region", "is lower-case letters, digits and '-', e.g. eu-west-1.")
    data = [("AWS_ACCESS_KEY_ID", key), ("AWS_SECRET_ACCESS_KEY", secret)]
    data += [("AWS_ENDPOINT_URL", endpoint)] if endpoint else []
    data += [("AWS_DEFAULT_REGION", region)] if region else []
    hint = f"key …{key[-4:]}" + (f" at {urlsplit(endpoint).hostname}" if endpoint else "") + (f", {region}" if region else "")
    return tuple(data), hint


def _git_ssh(values: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], str]:
    key = values["private_key"].replace("\r\n", "\n").strip()
    lines = key.split("\n")
    header = _KEY_HEADER.match(lines[0])
    if header is None or not re.fullmatch(r"-----END [A-Z0-9 ]*PRIVATE KEY-----", lines[-1]) or len(lines) < 3:
        raise _problem("private_key", "paste the whole private key, from its -----BEGIN … PRIVATE KEY----- line to its "
                                      "-----END … PRIVATE KEY----- line.")
    if "ENCRYPTED" in key:
        raise _problem("private_key", "is protected by a passphrase, which a workload cannot type; use a deploy key "
                                      "without one.")
    known_hosts = values["known_hosts"].replace("\r\n", "\n").strip()
    if _CONTROL.search(key) or _CONTROL.search(known_hosts):
        raise _problem("known_hosts" if _CONTROL.search(known_hosts) else "private_key", "holds control characters.")
    data = [(tenant_manifests.SSH_KEY, key + "\n")]
    data += [(tenant_manifests.SSH_KNOWN_HOSTS, known_hosts + "\n")] if known_hosts else []
    kind = (header.group(1).strip() or "PKCS#8").replace("OPENSSH", "OpenSSH")
    return tuple(data), f"{kind} key" + (", with known hosts" if known_hosts else "")


def _registry(values: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], str]:
    server, username, password = values["server"].strip().lower(), values["username"].strip(), values["password"]
    server = server.removeprefix("https://").rstrip("/")
    if not _HOST.match(server):
        raise _problem("server", "is a registry host, optionally with a port, e.g. ghcr.io or registry.example.com:5000.")
    if _CONTROL.search(username) or ":" in username:
        raise _problem("username", "may not hold ':' or control characters.")
    if _CONTROL.search(password) or "\n" in password:
        raise _problem("password", "may not hold control characters or line breaks.")
    auth = b64encode(f"{username}:{password}".encode()).decode()
    config = {"auths": {server: {"username": username, "password": password, "auth": auth}}}
    return ((tenant_manifests.DOCKER_CONFIG, json.dumps(config, sort_keys=True)),), f"{username} at {server}"


def _secret_of(credential: TeamCredential, data: tuple[tuple[str, str], ...]) -> dict[str, object]:
    _, spec = desired.team_specs([credential.team_id])[credential.team_id]
    return tenant_manifests.make_credential_secret(team=spec, credential=tenant_manifests.CredentialSpec(
        name=credential.name, secret_name=credential.secret_name, kind=credential.kind, data=data))


def _require(actor: User, team: Team) -> None:
    if not actor.has_perm("jobs.manage_credentials", team):
        raise PermissionDenied



def mounted_by(team: Team) -> dict[str, list[str]]:
    """Per credential name, the team's active workloads that chose it (queued ones too: their pods
    are still to be made, and would not start without it)."""
    chosen, _ = selectors.active_choices(team=team, parameter_type="credential")
    return chosen


def team_credentials(*, team: Team) -> list[CredentialRow]:
    users = mounted_by(team)
    return [CredentialRow(credential=credential, used_by=tuple(users.get(credential.name, ())))
            for credential in TeamCredential.objects.filter(team=team).select_related("created_by", "rotated_by")]


def credential_create(*, actor: User, team: Team, name: str, kind: str, values: Mapping[str, str]) -> TeamCredential:
    """Keeps a credential for the team: its Secret is made now, or nothing is kept."""
    _require(actor, team)
    data, hint = secret_data(kind, values)
    credential = TeamCredential(team=team, name=name, kind=kind, hint=hint, created_by=actor,
                                secret_name=f"cred-{name}-{secrets.token_hex(5)}")
    try:
        credential.full_clean(exclude=["team", "created_by", "rotated_by"], validate_unique=False)
    except ValidationError as error:
        field_name, messages = next(iter(error.message_dict.items()))
        raise DomainError(" ".join(messages), field=field_name) from None
    taken = DomainError(f"{team.slug} already has a credential named “{name}”; choose another name, or rotate that one.",
                        field="name")
    try:
        with transaction.atomic():
            credential.save()
            audit_record(actor=actor, action="credential.created", obj=credential, team_id=team.pk,
                         data={"name": name, "kind": kind, "hint": hint},
                         message=f"{actor.username} added the {credential.get_kind_display()} {name} ({hint}) to {team.slug}")
    except IntegrityError:
        raise taken from None
    try:
        gateway().apply(_secret_of(credential, data))
    except KubeError as error:
        # Its values are not kept, so no later pass can finish it: undo it, saying so.
        with transaction.atomic():
            audit_record(actor=actor, action="credential.refused", obj=credential, team_id=team.pk, data={"name": name},
                         message=f"The cluster did not take the credential {name} of {team.slug}, so it was not kept: {error}")
            if error.refused:
                credential.delete()
            else:  # it may have made it: the repair pass deletes whatever it holds, then the row
                TeamCredential.objects.filter(pk=credential.pk).update(state=TeamCredential.State.DELETING)
        verb = "refused" if error.refused else "did not answer about"
        raise DomainError(f"The cluster {verb} the credential {name}, so it was not kept; enter it again"
                          f"{'' if error.refused else ' in a minute'} ({error}).", field="name") from None
    TeamCredential.objects.filter(pk=credential.pk).update(applied=True)
    credential.applied = True
    return credential


def credential_rotate(*, actor: User, credential: TeamCredential, values: Mapping[str, str]) -> TeamCredential:
    """Writes new values over a credential's, in place: workloads mounting it by name get them."""
    team = credential.team
    _require(actor, team)
    data, hint = secret_data(credential.kind, values)
    with transaction.atomic():
        current = TeamCredential.objects.select_for_update().get(pk=credential.pk)
        if current.state != TeamCredential.State.ACTIVE or not current.applied:
            raise StateConflict(f"The credential {credential.name} is being deleted.")
        try:
            gateway().apply(_secret_of(current, data))
        except KubeError as error:
            shown = ("keeps its old values" if error.refused
                     else "may have its old or its new values; rotate it again")
            raise DomainError(f"The cluster did not take the new values of {credential.name}, so it {shown} "
                              f"({error}).", field="name") from None
        now = timezone.now()
        TeamCredential.objects.filter(pk=current.pk).update(hint=hint, rotated_by=actor, rotated_at=now)
        audit_record(actor=actor, action="credential.rotated", obj=current, team_id=team.pk,
                     data={"name": current.name, "hint": hint},
                     message=f"{actor.username} rotated the credential {current.name} of {team.slug} ({hint})")
    credential.hint, credential.rotated_by, credential.rotated_at = hint, actor, now
    return credential


def credential_delete(*, actor: User, credential: TeamCredential) -> None:
    """Deletes a credential and its Secret, unless a workload of the team mounts it now."""
    team = credential.team
    _require(actor, team)
    users = mounted_by(team).get(credential.name)
    if users:
        raise StateConflict(f"{credential.name} is in use by {', '.join(users)}; stop that first. Nothing was deleted.")
    with transaction.atomic():
        updated = (TeamCredential.objects.filter(pk=credential.pk, state=TeamCredential.State.ACTIVE)
                   .update(state=TeamCredential.State.DELETING))
        if not updated:
            raise StateConflict(f"The credential {credential.name} is already being deleted.")
        audit_record(actor=actor, action="credential.deleted", obj=credential, team_id=team.pk,
                     data={"name": credential.name, "kind": credential.kind},
                     message=f"{actor.username} deleted the credential {credential.name} of {team.slug}")
    credential.state = TeamCredential.State.DELETING
    try:
        _delete_secret(credential)
    except KubeError as error:
        log.warning("credential %s not deleted yet (the repair pass deletes it): %s", credential, error)


def _delete_secret(credential: TeamCredential) -> None:
    gateway().delete(ObjectRef("v1", "Secret", credential.secret_name, credential.team.namespace))
    credential.delete()


def credentials_repair() -> int:
    """Deletes the Secrets of credentials being deleted, and of any whose making never finished
    (older than ABANDONED_AFTER and not applied: its values are gone), then their rows. With
    nothing unfinished it calls nothing. Returns how many it finished."""
    finished = 0
    abandoned = Q(applied=False, created_at__lt=timezone.now() - ABANDONED_AFTER)
    for credential in TeamCredential.objects.filter(Q(state=TeamCredential.State.DELETING) | abandoned).select_related("team"):
        try:
            _delete_secret(credential)
        except KubeError as error:
            log.warning("credential %s not deleted yet: %s", credential, error)
            continue
        finished += 1
    return finished


def usable(*, team: Team) -> QuerySet[TeamCredential]:
    """The team's credentials a launch may mount: made, and not being deleted."""
    return TeamCredential.objects.filter(team=team, state=TeamCredential.State.ACTIVE, applied=True)


def chosen_secrets(*, team: Team, names: list[str]) -> dict[str, TeamCredential]:
    """The team's usable credentials of those names, by name."""
    return {credential.name: credential for credential in usable(team=team).filter(name__in=names)}
