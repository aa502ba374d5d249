"""A team's data volumes: PersistentVolumeClaims its members make, grow and delete from the portal
within the team's storage quota (Team.storage_quota, the namespace's ResourceQuota per storage
class), and mount by name in launches (a template's parameters of type volume).

The claim in the team's namespace is the truth of a volume's size and state; a TeamVolume row is
what the portal asked for, so the repair pass (`volumes_repair`) finishes what a failed call left
half done: it makes or grows the claim of a row not yet applied, and deletes one being deleted. A claim
the portal did not make for this team is listed and may be mounted, but is never changed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from jobs import manifests, selectors
from jobs.models import TeamVolume
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.kube import KubeError, ObjectRef, gateway
from portal.kube.base import quantity
from portal.models import User
from tenants import desired
from tenants import manifests as tenant_manifests
from tenants.models import Team

log = logging.getLogger(__name__)

CLAIM = ("v1", "PersistentVolumeClaim")
GIB = 2**30


@dataclass(frozen=True)
class StorageLine:
    """One storage class of a team's quota: granted, asked for by its claims, and what is left."""

    storage_class: str
    granted_gib: int
    asked_gib: int

    @property
    def free_gib(self) -> int:
        return max(self.granted_gib - self.asked_gib, 0)


@dataclass(frozen=True)
class VolumeRow:
    name: str
    storage_class: str
    asked_gib: int  # what its claim asks for
    capacity: str  # what the cluster gave it once bound ("" before)
    phase: str  # the claim's: Bound, Pending, Lost; "Not in the cluster yet" before its claim is made
    made: TeamVolume | None  # made through the portal: it may be grown and deleted here
    used_by: tuple[str, ...] = ()  # what mounts it now: workloads by name, other pods by pod name
    going: bool = False

    @property
    def deletable(self) -> bool:
        return self.made is not None and not self.used_by and not self.going


@dataclass
class TeamStorage:
    team: Team
    rows: list[VolumeRow] = field(default_factory=list)
    lines: list[StorageLine] = field(default_factory=list)
    unreachable: str = ""  # why the cluster was not read


def _gib(claim: dict[str, Any]) -> int:
    asked = quantity(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage", "0"))
    return math.ceil(asked / GIB) if asked else 0


def _claims(team: Team) -> list[dict[str, Any]]:
    items, _ = gateway().list(*CLAIM, namespace=team.namespace)
    return items


def _lines(team: Team, claims: list[dict[str, Any]]) -> list[StorageLine]:
    asked: dict[str, int] = {}
    for claim in claims:
        name = (claim.get("spec") or {}).get("storageClassName") or ""
        asked[name] = asked.get(name, 0) + _gib(claim)
    return [StorageLine(storage_class=name, granted_gib=int(gib), asked_gib=asked.get(name, 0))
            for name, gib in sorted(team.storage_quota.items())]


def _mounted(team: Team, pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per claim, what mounts it now: the portal's active workloads that chose it (also those
    still waiting, whose pods are not made yet), and any other pod that has not ended (one made
    outside the portal, or a stopped workload's still winding down)."""
    users, active = selectors.active_choices(team=team, parameter_type="volume")
    for pod in pods:
        ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if ended or (pod["metadata"].get("labels") or {}).get(manifests.WORKLOAD_LABEL) in active:
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                users.setdefault(claim, []).append(f"pod {pod['metadata']['name']}")
    return users


def team_storage(*, team: Team) -> TeamStorage:
    """The team's volumes as the cluster has them, with what mounts each and the quota per class."""
    storage = TeamStorage(team=team)
    made = {volume.name: volume for volume in TeamVolume.objects.filter(team=team)}
    try:
        claims = _claims(team)
        pods, _ = gateway().list("v1", "Pod", namespace=team.namespace)
    except KubeError as error:
        storage.unreachable = str(error)
        storage.lines = _lines(team, [])
        storage.rows = [VolumeRow(name=v.name, storage_class=v.storage_class, asked_gib=v.size_gib, capacity="",
                                  phase="Unknown", made=v, going=v.state == TeamVolume.State.DELETING)
                        for v in made.values()]
        return storage
    users = _mounted(team, pods)
    seen = set()
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        name = claim["metadata"]["name"]
        seen.add(name)
        ours = made.get(name) if _ours(claim, team) else None
        going = bool(claim["metadata"].get("deletionTimestamp")) or (ours is not None and ours.state == TeamVolume.State.DELETING)
        storage.rows.append(VolumeRow(
            name=name, storage_class=(claim.get("spec") or {}).get("storageClassName") or "", asked_gib=_gib(claim),
            capacity=str(((claim.get("status") or {}).get("capacity") or {}).get("storage", "")),
            phase=str((claim.get("status") or {}).get("phase") or "Pending"), made=ours,
            used_by=tuple(users.get(name, ())),
            going=going))
    for name, volume in sorted(made.items()):
        if name not in seen and volume.state == TeamVolume.State.ACTIVE:
            storage.rows.append(VolumeRow(name=name, storage_class=volume.storage_class, asked_gib=volume.size_gib,
                                          capacity="", phase="Not in the cluster yet", made=volume))
    storage.lines = _lines(team, claims)
    return storage


def _ours(claim: dict[str, Any], team: Team) -> bool:
    labels = claim["metadata"].get("labels") or {}
    return (tenant_manifests.owned_by_team(claim, uid=str(team.uid)) and labels.get(tenant_manifests.TEAM_LABEL) == team.slug
            and labels.get(tenant_manifests.VOLUME_LABEL) == claim["metadata"]["name"])


def _claim_of(volume: TeamVolume) -> dict[str, Any]:
    _, spec = desired.team_specs([volume.team_id])[volume.team_id]
    return tenant_manifests.make_volume_claim(team=spec, volume=tenant_manifests.VolumeSpec(
        name=volume.name, storage_class=volume.storage_class, size_gib=volume.size_gib, shared=volume.shared))


def _require(actor: User, team: Team) -> None:
    if not actor.has_perm("jobs.manage_volumes", team):
        raise PermissionDenied


def _unanswered(team: Team, error: KubeError) -> DomainError:
    return DomainError(f"The cluster did not answer about {team.slug}'s volumes; nothing was changed. Try again in a "
                       f"minute ({error}).")


def _room(team: Team, claims: list[dict[str, Any]], storage_class: str) -> int:
    return next((line.free_gib for line in _lines(team, claims) if line.storage_class == storage_class), 0)



def volume_create(*, actor: User, team: Team, name: str, storage_class: str, size_gib: int, shared: bool = False) -> TeamVolume:
    """Makes a data volume for the team, within its storage quota of that class."""
    _require(actor, team)
    volume = TeamVolume(team=team, name=name, storage_class=storage_class, size_gib=size_gib, shared=shared, created_by=actor)
    try:
        volume.full_clean(exclude=["team", "created_by"], validate_unique=False)
    except ValidationError as error:
        field_name, messages = next(iter(error.message_dict.items()))
        raise DomainError(" ".join(messages), field=field_name) from None
    if storage_class not in team.storage_quota:
        offered = ", ".join(sorted(team.storage_quota)) or "none yet"
        raise DomainError(f"{team.slug} has no storage quota of the class “{storage_class}”; its classes: {offered}. "
                          "A platform admin sets a team's storage quota.", field="storage_class")
    try:
        claims = _claims(team)
    except KubeError as error:
        raise _unanswered(team, error) from None
    if any(claim["metadata"]["name"] == name for claim in claims):
        raise DomainError(f"{team.slug} already has a volume named “{name}”; choose another name.", field="name")
    room = _room(team, claims, storage_class)
    if size_gib > room:
        raise DomainError(f"{size_gib} GiB of {storage_class} is more than {team.slug} has left of its storage quota "
                          f"({room} GiB of {team.storage_quota[storage_class]} GiB); make it smaller, or delete a volume.",
                          field="size_gib")
    try:
        with transaction.atomic():
            volume.save()
            audit_record(actor=actor, action="volume.created", obj=volume, team_id=team.pk,
                         data={"name": name, "storage_class": storage_class, "size_gib": size_gib, "shared": shared},
                         message=f"{actor.username} made the volume {name} ({size_gib} GiB of {storage_class}) for {team.slug}")
    except IntegrityError:
        raise DomainError(f"{team.slug} already has a volume named “{name}”; choose another name.", field="name") from None
    try:
        _apply(volume)
    except KubeError as error:
        if not error.refused:
            log.warning("volume %s not made yet (the repair pass makes it): %s", volume, error)
            return volume
        with transaction.atomic():
            audit_record(actor=actor, action="volume.refused", obj=volume, team_id=team.pk, data={"name": name},
                         message=f"The cluster refused the volume {name} of {team.slug}, so it was not made: {error}")
            volume.delete()
        raise DomainError(f"The cluster refused the volume {name}: {error}", field="size_gib") from None
    return volume


def _apply(volume: TeamVolume) -> None:
    """Applies the volume's claim as its row asks, then records that it is."""
    gateway().apply(_claim_of(volume))
    TeamVolume.objects.filter(pk=volume.pk, size_gib=volume.size_gib).update(applied=True)
    volume.applied = True


def volume_resize(*, actor: User, volume: TeamVolume, size_gib: int) -> TeamVolume:
    """Grows a volume the portal made (a claim only ever grows), within the team's storage quota."""
    team = volume.team
    _require(actor, team)
    if volume.state != TeamVolume.State.ACTIVE:
        raise StateConflict(f"The volume {volume.name} is being deleted.")
    if isinstance(size_gib, bool) or not isinstance(size_gib, int) or size_gib <= volume.size_gib:
        raise DomainError(f"A volume only grows: give more than its {volume.size_gib} GiB.", field="size_gib")
    try:
        claims = _claims(team)
    except KubeError as error:
        raise _unanswered(team, error) from None
    room = _room(team, claims, volume.storage_class)
    if size_gib - volume.size_gib > room:
        raise DomainError(f"Growing {volume.name} to {size_gib} GiB needs {size_gib - volume.size_gib} GiB more of "
                          f"{volume.storage_class}; {team.slug} has {room} GiB left of its storage quota.", field="size_gib")
    before = volume.size_gib
    with transaction.atomic():
        TeamVolume.objects.filter(pk=volume.pk).update(size_gib=size_gib, applied=False)
        volume.size_gib, volume.applied = size_gib, False
        audit_record(actor=actor, action="volume.resized", obj=volume, team_id=team.pk,
                     data={"name": volume.name, "from_gib": before, "to_gib": size_gib},
                     message=f"{actor.username} grew the volume {volume.name} of {team.slug} from {before} to {size_gib} GiB")
    try:
        _apply(volume)
    except KubeError as error:
        if not error.refused:
            log.warning("volume %s not grown yet (the repair pass grows it): %s", volume, error)
            return volume
        TeamVolume.objects.filter(pk=volume.pk).update(size_gib=before, applied=True)
        volume.size_gib, volume.applied = before, True
        raise DomainError(f"The cluster refused to grow {volume.name}: {error}. A volume grows only where its storage "
                          "class allows it (allowVolumeExpansion) and once it is bound to storage.", field="size_gib") from None
    return volume


def volume_delete(*, actor: User, volume: TeamVolume) -> None:
    """Deletes a volume the portal made, and its data, unless something mounts it now."""
    team = volume.team
    _require(actor, team)
    try:
        pods, _ = gateway().list("v1", "Pod", namespace=team.namespace)
    except KubeError as error:
        raise _unanswered(team, error) from None
    users = _mounted(team, pods).get(volume.name)
    if users:
        raise StateConflict(f"{volume.name} is in use by {', '.join(users)}; stop that first. Nothing was deleted.")
    with transaction.atomic():
        updated = TeamVolume.objects.filter(pk=volume.pk, state=TeamVolume.State.ACTIVE).update(state=TeamVolume.State.DELETING)
        if not updated:
            raise StateConflict(f"The volume {volume.name} is already being deleted.")
        audit_record(actor=actor, action="volume.deleted", obj=volume, team_id=team.pk,
                     data={"name": volume.name, "storage_class": volume.storage_class, "size_gib": volume.size_gib},
                     message=f"{actor.username} deleted the volume {volume.name} ({volume.size_gib} GiB) of {team.slug} "
                             "and its data")
    volume.state = TeamVolume.State.DELETING
    try:
        _delete_claim(volume)
    except KubeError as error:
        log.warning("volume %s not deleted yet (the repair pass deletes it): %s", volume, error)


def _delete_claim(volume: TeamVolume) -> None:
    """Deletes the volume's claim if it is the portal's for this team, then its row."""
    ref = ObjectRef(*CLAIM, volume.name, volume.team.namespace)
    live = gateway().get(ref)
    if live is not None and _ours(live, volume.team):
        gateway().delete(ref)
    volume.delete()


def volumes_repair() -> int:
    """Finishes what a failed call left half done: makes or grows the claim of each volume not yet
    applied, and deletes each being deleted. A claim of that name the portal did not make for the
    team is never touched (its volume stays unapplied, and the page says so). Reads only those
    volumes' claims: with nothing unfinished it reads nothing. Returns how many it finished."""
    finished = 0
    unfinished = TeamVolume.objects.filter(Q(applied=False) | Q(state=TeamVolume.State.DELETING)).select_related("team")
    for volume in unfinished:
        try:
            if volume.state == TeamVolume.State.DELETING:
                _delete_claim(volume)
            else:
                live = gateway().get(ObjectRef(*CLAIM, volume.name, volume.team.namespace))
                if live is not None and not _ours(live, volume.team):
                    log.warning("volume %s: a claim of that name is not the portal's; left alone", volume)
                    continue
                _apply(volume)
        except KubeError as error:
            log.warning("volume %s not repaired yet: %s", volume, error)
            continue
        finished += 1
    return finished
