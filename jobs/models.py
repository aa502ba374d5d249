"""Workload templates (versioned), workloads, their phase history and pods' run intervals."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.deconstruct import deconstructible

from jobs import kinds, policy
from jobs.idle_policy import IdleAction, defaults_problems
from portal.models import User
from portal.roles import sees_all_teams
from tenants.models import MAX_VOLUME_GIB, Flavor, Team, user_team_roles

# The kinds jobs/kinds/ registers, as choices: a kind added there is a choice here (and a migration).
# (django-stubs types only the functional form without labels; Django takes (value, label) pairs.)
WorkloadKind = models.TextChoices(  # type: ignore[call-overload]
    "WorkloadKind", [(name.upper(), (name, label)) for name, label in kinds.choices()])


class Priority(models.TextChoices):
    LOW = "low", "Low (preemptible)"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"


# Whom each tier is for (jobs/rules.py says who may use which): members launch at the tiers a
# template allows, low and normal unless it says otherwise; a team's leads and platform admins at any.
MEMBER_PRIORITIES = [Priority.LOW.value, Priority.NORMAL.value]


def default_allowed_priorities() -> list[str]:
    return list(MEMBER_PRIORITIES)


def validate_priorities(value: Any) -> None:
    if not isinstance(value, list) or not value or any(tier not in Priority.values for tier in value):
        raise ValidationError(f"Allowed priorities must be a list of one or more of {', '.join(Priority.values)}.")


@deconstructible
class LimitValidator:
    """A template limit within its bounds (jobs/policy.LIMITS), for the admin and full_clean()."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, value: Any) -> None:
        problem = policy.limit_problem(self.field, value)
        if problem:
            raise ValidationError(problem)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LimitValidator) and other.field == self.field

    def __hash__(self) -> int:
        return hash(self.field)


class WorkloadTemplateQuerySet(models.QuerySet["WorkloadTemplate"]):
    def for_user(self, user: User | AnonymousUser) -> WorkloadTemplateQuerySet:
        """Global templates, and those shared with (or owned by) one of the user's teams."""
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        teams = list(user_team_roles(user))
        return self.filter(Q(is_global=True) | Q(teams__in=teams) | Q(owner_team__in=teams)).distinct()

    def for_team(self, team: Team) -> WorkloadTemplateQuerySet:
        return self.filter(Q(is_global=True) | Q(teams=team) | Q(owner_team=team), is_active=True).distinct()


class WorkloadTemplate(models.Model):
    """What users launch. Its settings live in versions; editing makes a new version."""

    # Unique within its owner team, and among the portal's own templates (no owner team): a lead
    # choosing a slug learns nothing of other teams' templates. Addressed by id; see selectors.template_named.
    slug = models.SlugField(max_length=40)
    name = models.CharField(max_length=80)
    kind = models.CharField(max_length=12, choices=WorkloadKind.choices)
    description = models.TextField(blank=True)
    is_global = models.BooleanField(default=True, help_text="Visible to every team.")
    teams = models.ManyToManyField(Team, blank=True, related_name="shared_templates", help_text="Visible to these teams.")
    owner_team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="own_templates",
                                   help_text="A team template, managed by that team's leads.")
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = WorkloadTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner_team", "slug"], condition=Q(owner_team__isnull=False),
                                    name="template_slug_unique_in_its_team"),
            models.UniqueConstraint(fields=["slug"], condition=Q(owner_team__isnull=True),
                                    name="template_slug_unique_among_portal_templates"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def current(self) -> WorkloadTemplateVersion:
        return self.versions.order_by("-number").first()  # type: ignore[return-value]

    @property
    def kind_facts(self) -> kinds.Kind:
        """What its kind declares (jobs/kinds/): what the pages and services ask of a kind."""
        return kinds.get(self.kind)


class WorkloadTemplateVersion(models.Model):
    """An immutable version: running workloads keep the one they were launched with."""

    template = models.ForeignKey(WorkloadTemplate, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True, help_text="May use {parameter} placeholders.")
    env = models.JSONField(default=dict, blank=True, help_text="May use {parameter} placeholders.")
    flavors = models.ManyToManyField(Flavor, related_name="+")
    default_units = models.PositiveIntegerField(default=1, validators=[LimitValidator("default_units")])
    max_units = models.PositiveIntegerField(default=8, validators=[LimitValidator("max_units")])
    default_cpu = models.PositiveIntegerField(default=4, validators=[LimitValidator("default_cpu")])
    max_cpu = models.PositiveIntegerField(default=32, validators=[LimitValidator("max_cpu")])
    default_memory_gib = models.PositiveIntegerField(default=16, validators=[LimitValidator("default_memory_gib")])
    max_memory_gib = models.PositiveIntegerField(default=256, validators=[LimitValidator("max_memory_gib")])
    default_priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    allowed_priorities = models.JSONField(
        default=default_allowed_priorities, validators=[validate_priorities],
        help_text="The tiers members may launch at; the team's leads and platform admins may use any tier.")
    max_runtime_seconds = models.PositiveIntegerField(default=24 * 3600, validators=[LimitValidator("max_runtime_seconds")])
    storage_gib = models.PositiveIntegerField(default=0, validators=[LimitValidator("storage_gib")],
                                              help_text="A per-user volume for notebooks; 0 for none.")
    idle_minutes = models.PositiveIntegerField(default=0, validators=[LimitValidator("idle_minutes")],
                                               help_text="Notebooks stop after this long idle; 0 never.")
    # The idle policy (jobs/idle_policy.py): GPU engine active below the threshold for the window
    # is idle; then the owner is warned and, after the grace, the action taken. An empty field
    # takes the platform's default (IdleDefaults); a set one must lie within its bounds.
    idle_threshold_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Idle below this GPU engine-active percentage; empty: the platform's default.")
    idle_window_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Idle for this long before the owner is warned; empty: the platform's default.")
    idle_action = models.CharField(
        max_length=12, choices=IdleAction.choices, blank=True,
        help_text="What happens to an idle workload after the grace; empty: the platform's default.")
    idle_grace_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Between the warning and the action; empty: the platform's default.")
    port = models.PositiveIntegerField(default=0, validators=[LimitValidator("port")],
                                       help_text="Inference and notebooks: the port the server listens on.")
    parameters = models.JSONField(default=list, blank=True, help_text="What users may set: name, type, default, bounds.")
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["template", "-number"]
        constraints = [models.UniqueConstraint(fields=["template", "number"], name="one_template_version_number")]

    def __str__(self) -> str:
        return f"{self.template.name} v{self.number}"


class AllowListEntry(models.Model):
    """An entry of an allow-list platform admins keep: a host, or a host and a path prefix,
    matched by whole segments. Entries are added and removed, never edited: each step is audited."""

    prefix = models.CharField(max_length=255, unique=True)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True
        ordering = ["prefix"]

    def __str__(self) -> str:
        return self.prefix


class ImageRegistry(AllowListEntry):
    """The image allow-list: templates may only use images from these registries (and from
    PORTAL_IMAGE_REGISTRIES, set at deployment)."""

    prefix = models.CharField(max_length=255, unique=True,
                              help_text="A registry host, optionally with a path: nvcr.io/nvidia, docker.io/pytorch.")

    class Meta(AllowListEntry.Meta):
        verbose_name_plural = "image registries"


class GitSource(AllowListEntry):
    """The git allow-list: templates' git parameters fetch only from these (and from
    PORTAL_GIT_SOURCES, set at deployment)."""

    prefix = models.CharField(max_length=255, unique=True,
                              help_text="A git host, optionally with a path: github.com/acme, git.example.com.")


class WorkloadQuerySet(models.QuerySet["Workload"]):
    def for_user(self, user: User | AnonymousUser) -> WorkloadQuerySet:
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        return self.filter(team_id__in=list(user_team_roles(user)))

    def active(self) -> WorkloadQuerySet:
        return self.filter(phase__in=Workload.ACTIVE_PHASES)


def site_queue_backend() -> str:
    """The queue backend a workload made now runs on: the site's."""
    return str(settings.PORTAL_QUEUE_BACKEND)


class Workload(models.Model):
    class Phase(models.TextChoices):
        SUBMITTING = "submitting", "Submitting"
        QUEUED = "queued", "Queued"
        ADMITTED = "admitted", "Admitted"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        STOPPED = "stopped", "Stopped"
        PREEMPTED = "preempted", "Preempted"

    ACTIVE_PHASES = (Phase.SUBMITTING, Phase.QUEUED, Phase.ADMITTED, Phase.RUNNING, Phase.PREEMPTED)
    FINAL_PHASES = (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="workloads")
    owner = models.ForeignKey(User, on_delete=models.PROTECT, related_name="workloads")
    template_version = models.ForeignKey(WorkloadTemplateVersion, on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=60)
    parameters = models.JSONField(default=dict, blank=True)
    # The flavor it runs on: the one its launch named, or, where the launch accepted several, the
    # one Kueue admitted it on (each pod's run interval keeps its own).
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="workloads",
                               help_text="The flavor it runs on: the one launched on, or the one Kueue admitted it on.")
    accepted_flavors = models.ManyToManyField(
        Flavor, blank=True, related_name="+",
        help_text="Every flavor the launch accepts when it named several (one resource name); empty: only its flavor.")
    units = models.PositiveIntegerField(help_text="GPU units per worker or replica.")
    workers = models.PositiveIntegerField(default=1, help_text="Pods of a distributed job, replicas of a server.")
    cpu = models.PositiveIntegerField()
    memory_gib = models.PositiveIntegerField()
    priority = models.CharField(max_length=8, choices=Priority.choices)
    phase = models.CharField(max_length=12, choices=Phase.choices, default=Phase.SUBMITTING, db_index=True)
    reason = models.TextField(blank=True, help_text="Why it is in this phase, in words.")
    on_borrowed = models.BooleanField(default=False, help_text="Admitted on quota borrowed from other teams.")
    # Queued in the portal, not yet in the cluster: its owner's other work holds the team's GPUs
    # per person (Team.person_gpu_limit); jobs.services submits it when theirs ends.
    waits_for_person_limit = models.BooleanField(
        default=False, db_default=False, help_text="Waits in the portal for its owner's per-person GPU limit.")
    # Only the SHA-256 of a notebook's token: the token itself lives in the workload's Kubernetes
    # Secret (jobs/access.py derives it again for the owner's hand-over).
    notebook_token_sha256 = models.CharField(max_length=64, blank=True)
    relaunch_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The queue it waits in, fixed at launch so a change of membership never moves it: on Kueue its
    # owner's LocalQueue in the team (admission fair sharing orders the team's work by each one's
    # recent use); empty for the team's one queue (Volcano, and work launched before).
    queue_name = models.CharField(max_length=63, blank=True, default="", db_default="", editable=False,
                                  help_text="The team queue it waits in: its owner's, on Kueue.")
    # The site's PORTAL_QUEUE_BACKEND when it was made: the site cannot switch while any still runs on another.
    queue_backend = models.CharField(max_length=20, default=site_queue_backend, editable=False,
                                     help_text="The queue backend it was launched on (kueue or volcano).")
    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Only an owner once in the cluster can be proven gone (see reached_cluster): absence from a
    # cache that has not caught up with a new Job proves nothing.
    seen_in_cluster_at = models.DateTimeField(
        null=True, blank=True, help_text="When the status sync first saw its Job, Deployment or StatefulSet in the cluster.")
    submit_attempts = models.PositiveSmallIntegerField(default=0)
    # Set when the broker did not take what was asked for it (Redis down): its submission, or its
    # removal once stopped. The next resubmit pass sends it again, without waiting out
    # PORTAL_SUBMITTING_BOUND_SECONDS as it does for a message that may merely be in the queue.
    unsent_since = models.DateTimeField(
        null=True, blank=True, help_text="When its submission or removal could not be handed to the workers' queue.")

    objects = WorkloadQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "phase"]), models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def kind(self) -> str:
        return self.template_version.template.kind

    @property
    def kind_facts(self) -> kinds.Kind:
        return kinds.get(self.kind)

    @property
    def k8s_name(self) -> str:
        """Deterministic and DNS-1123 safe, so applying again is always safe."""
        return f"wl-{self.pk}"

    @property
    def is_active(self) -> bool:
        return self.phase in self.ACTIVE_PHASES

    @property
    def total_units(self) -> int:
        return self.units * self.workers

    @property
    def reached_cluster(self) -> bool:
        """Its owner was in the cluster once: the API server took it at submission, or the sync saw it."""
        return self.submitted_at is not None or self.seen_in_cluster_at is not None


class WorkloadTransition(models.Model):
    """The status timeline: every phase a workload went through, when and why."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="transitions")
    phase = models.CharField(max_length=12, choices=Workload.Phase.choices)
    reason = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.phase} at {self.at:%Y-%m-%d %H:%M:%S}"


class RunInterval(models.Model):
    """One pod's time on a GPU node. Keyed by pod UID: re-reading the cluster never duplicates one.

    Metered usage outlives what produced it, so an interval keeps what billing needs (the team's
    uid, the flavor, the owner's id and username, units and the flavor's fraction at the time, whether it
    began on borrowed quota and when that changed) and its links to the workload, team and owner
    fall to null when those are deleted. `metered_until` and `settled` are the metering engine's
    bookkeeping: set when a refresh first metered it (an open interval is then in the rollups up to
    their watermark), and whether it is there to its end for good.
    """

    workload = models.ForeignKey(Workload, null=True, blank=True, on_delete=models.SET_NULL, related_name="intervals")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    team_uid = models.UUIDField(help_text="The team's uid: billing finds its account by it after the team is gone.")
    owner = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    owner_username = models.CharField(max_length=150, blank=True)
    # The owner's user id, kept when the user is deleted (the link above falls to null): usage is keyed
    # on the person, so a later account that takes the same username never inherits this one's.
    owner_key = models.PositiveIntegerField(null=True, blank=True, help_text="The owner's user id at the time.")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    borrowed = models.BooleanField(default=False, help_text="Began on quota borrowed from other teams.")
    pod_uid = models.CharField(max_length=64, unique=True)
    pod_name = models.CharField(max_length=253)
    node = models.CharField(max_length=253, blank=True)
    resource_name = models.CharField(max_length=120)
    units = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    metered_until = models.DateTimeField(null=True, blank=True, help_text="When the rollups first held it (up to here).")
    settled = models.BooleanField(default=False, help_text="Ended and metered to its end: metering skips it.")

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["started_at"], name="run_interval_started"),
            models.Index(fields=["ended_at"], name="run_interval_ended"),
            # a team's intervals overlapping a period (top workloads): without it PostgreSQL ANDs
            # the team's bitmap with every interval that ended after the period's start
            models.Index(fields=["team", "ended_at"], name="run_interval_team_ended"),
            models.Index(fields=["id"], condition=Q(settled=False), name="run_interval_unsettled"),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} ({self.units} × {self.resource_name})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding and self.workload_id is not None:
            self.fill_from_workload()
        super().save(*args, **kwargs)

    def fill_from_workload(self) -> None:
        """Copies what billing needs from the workload, so the interval no longer depends on it."""
        workload = self.workload
        assert workload is not None
        if self.team_id is None:
            self.team_id = workload.team_id
        if self.team_uid is None:
            self.team_uid = workload.team.uid
        if self.owner_id is None:
            self.owner_id = workload.owner_id
        if not self.owner_username:
            self.owner_username = workload.owner.username
        if self.owner_key is None:
            self.owner_key = workload.owner_id
        if self.flavor_id is None:
            self.flavor_id = workload.flavor_id
        if self.fraction_numerator is None or self.fraction_denominator is None:
            self.fraction_numerator = workload.flavor.fraction_numerator
            self.fraction_denominator = workload.flavor.fraction_denominator
        if not self.borrowed:
            self.borrowed = workload.on_borrowed


class RunIntervalSwitch(models.Model):
    """The moment a running interval's workload moved between guaranteed and borrowed quota.

    Metering splits the interval there: each second is attributed to the state it was in, and a
    recomputation from these rows reproduces it."""

    interval = models.ForeignKey(RunInterval, on_delete=models.CASCADE, related_name="switches")
    at = models.DateTimeField()
    borrowed = models.BooleanField(help_text="The state from this moment on.")

    class Meta:
        ordering = ["interval", "at", "id"]

    def __str__(self) -> str:
        return f"{self.interval}: {'borrowed' if self.borrowed else 'guaranteed'} from {self.at:%Y-%m-%d %H:%M:%S}"


class WorkloadEvent(models.TextChoices):
    """What happens to a workload that its owner may want to hear about."""

    FAILED = "failed", "Failed"
    PREEMPTED = "preempted", "Preempted"
    IDLE_STOPPED = "idle_stopped", "Stopped for idleness"
    FINISHED = "finished", "Finished"


class NotifyBy(models.TextChoices):
    OFF = "off", "Not at all"
    APP = "app", "In the portal"
    EMAIL = "email", "In the portal and by email"


class WorkloadNotificationPreference(models.Model):
    """How a person hears about their own workloads, per event. No row means the defaults:
    failures, preemptions and idle stops in the portal and by email; finished runs not at all."""

    DEFAULTS = {WorkloadEvent.FAILED: NotifyBy.EMAIL, WorkloadEvent.PREEMPTED: NotifyBy.EMAIL,
                WorkloadEvent.IDLE_STOPPED: NotifyBy.EMAIL, WorkloadEvent.FINISHED: NotifyBy.OFF}

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="workload_notification_preference")
    failed = models.CharField(max_length=5, choices=NotifyBy.choices, default=NotifyBy.EMAIL)
    preempted = models.CharField(max_length=5, choices=NotifyBy.choices, default=NotifyBy.EMAIL)
    idle_stopped = models.CharField(max_length=5, choices=NotifyBy.choices, default=NotifyBy.EMAIL)
    finished = models.CharField(max_length=5, choices=NotifyBy.choices, default=NotifyBy.OFF)

    def __str__(self) -> str:
        return f"workload notifications of {self.user}"

    def by(self, event: str) -> str:
        return str(getattr(self, event))

class IdleDefaults(models.Model):
    """The platform's idle policy (one row, kept by platform admins): the default every template
    version without its own setting takes, and the bounds a template owner chooses within."""

    threshold_percent = models.PositiveSmallIntegerField(default=5)
    window_minutes = models.PositiveIntegerField(default=30)
    action = models.CharField(max_length=12, choices=IdleAction.choices, default=IdleAction.NOTIFY)
    grace_minutes = models.PositiveIntegerField(default=15)
    min_threshold_percent = models.PositiveSmallIntegerField(default=1)
    max_threshold_percent = models.PositiveSmallIntegerField(default=20)
    min_window_minutes = models.PositiveIntegerField(default=10)
    max_window_minutes = models.PositiveIntegerField(default=24 * 60)
    min_grace_minutes = models.PositiveIntegerField(default=5)
    max_grace_minutes = models.PositiveIntegerField(default=4 * 60)
    allowed_actions = models.JSONField(default=list, blank=True,
                                       help_text="The actions owners may choose; empty: all of them.")
    updated_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = verbose_name_plural = "idle policy defaults"

    def __str__(self) -> str:
        return "Idle policy defaults"

    @classmethod
    def current(cls) -> IdleDefaults:
        found = cls.objects.order_by("pk").first()
        return found if found is not None else cls()

    def clean(self) -> None:
        problems = defaults_problems(self)
        if problems:
            raise ValidationError(problems)


class WorkloadIdleState(models.Model):
    """What the idle sweep last saw of a running workload, and where it is in warn → act."""

    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, primary_key=True, related_name="idle_state")
    checked_at = models.DateTimeField(null=True, blank=True)
    engine_active = models.FloatField(null=True, blank=True, help_text="The last 5 minutes, percent; empty: no metrics.")
    idle_since = models.DateTimeField(null=True, blank=True)
    warned_at = models.DateTimeField(null=True, blank=True)
    action_due_at = models.DateTimeField(null=True, blank=True)
    kept_until = models.DateTimeField(null=True, blank=True, help_text="Kept running: not judged idle before this.")
    kept_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"idle state of workload {self.workload_id}"


class SpentTicket(models.Model):
    """A workload ticket (jobs/access.py) spent at the gate, by its nonce, so one ticket never
    opens a workload twice. In the database rather than the cache: the gate must let people in
    while Redis is away. Rows older than twice a ticket's life are deleted as new ones are spent."""

    nonce = models.CharField(max_length=64, unique=True)
    spent_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"ticket {self.nonce[:6]}… spent {self.spent_at:%Y-%m-%d %H:%M:%S}"


class GpuXidEvent(models.Model):
    """An XID error a GPU reported while a workload's pod held it (DCGM_FI_DEV_XID_ERRORS changed).

    A hardware XID (portal/metrics/xid.py) makes the pod's GPU time after it non-billable: billing
    credits it when the month is closed. Kept with the pod's name so the credit finds its interval."""

    # Like run intervals, it outlives its workload: the credit it gives is billing history.
    workload = models.ForeignKey(Workload, null=True, on_delete=models.SET_NULL, related_name="xid_events")
    pod_name = models.CharField(max_length=253)
    gpu = models.CharField(max_length=100, help_text="The GPU's UUID as DCGM reports it.")
    node = models.CharField(max_length=253, blank=True)
    code = models.PositiveIntegerField()
    hardware = models.BooleanField(help_text="The GPU's fault, not the program's: its time after this is not billed.")
    at = models.DateTimeField(help_text="When the portal saw it (within a sweep of the error).")

    class Meta:
        ordering = ["at", "id"]
        constraints = [models.UniqueConstraint(fields=["pod_name", "gpu", "code"], name="one_xid_event_per_pod_gpu_code")]

    def __str__(self) -> str:
        return f"XID {self.code} on {self.gpu} ({self.pod_name})"


# --- Data volumes ----------------------------------------------------------------------------------


def _kept_for(queryset: Any, user: User | AnonymousUser) -> Any:
    """What the teams the user belongs to keep (platform admins: all teams'). Finance sees every
    team but not its volumes' or credentials' names, as on the launch form: another team's is 404."""
    if getattr(user, "is_platform_admin", False) and user.is_active:
        return queryset.all()
    return queryset.filter(team_id__in=list(user_team_roles(user)))


class TeamVolumeQuerySet(models.QuerySet["TeamVolume"]):
    def for_user(self, user: User | AnonymousUser) -> TeamVolumeQuerySet:
        return _kept_for(self, user)


class TeamCredentialQuerySet(models.QuerySet["TeamCredential"]):
    def for_user(self, user: User | AnonymousUser) -> TeamCredentialQuerySet:
        return _kept_for(self, user)


class TeamVolume(models.Model):
    """A data volume a member made for the team: the PersistentVolumeClaim of that name in the
    team's namespace. The claim is the truth of its size and state; this row is what the portal
    asked for, so the team pass can make or finish what a failed call left half done."""

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        DELETING = "deleting", "Being deleted"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(max_length=63, validators=[RegexValidator(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "Use lower-case letters, digits and '-', starting and ending with a letter or digit.")])
    storage_class = models.CharField(max_length=253)
    size_gib = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_VOLUME_GIB)])
    # Many pods at once, on any node (ReadWriteMany), where the class can; else one node's pods (ReadWriteOnce).
    shared = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    # Its claim is in the cluster as this row asks (made, and grown to size_gib). False until the
    # call that makes or grows it succeeds; the repair pass (volumes_repair) finishes it otherwise.
    applied = models.BooleanField(default=False)
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamVolumeQuerySet.as_manager()

    class Meta:
        ordering = ["team", "name"]
        indexes = [models.Index(fields=["applied", "state"], name="team_volume_unfinished")]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="team_volume_name_unique")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"


class TeamCredential(models.Model):
    """A secret a member keeps for the team (an S3 key, a git deploy key, a registry login): the
    Secret `secret_name` in the team's namespace. The values are written once, into the Secret,
    and never kept here nor shown again; this row holds the name launches use and a hint to tell
    credentials apart (the key's id, the registry and user, the key's type: nothing secret)."""

    class Kind(models.TextChoices):
        S3 = "s3", "S3 access key"
        GIT_SSH = "git-ssh", "Git deploy key (SSH)"
        REGISTRY = "registry", "Image registry login"

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        DELETING = "deleting", "Being deleted"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="credentials")
    name = models.CharField(max_length=40, validators=[RegexValidator(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "Use lower-case letters, digits and '-', starting and ending with a letter or digit.")])
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # The Secret's name: cred-<name>-<random>. No one else names a Secret so, which is what lets
    # the portal (allowed to write Secrets, never to read them) delete it as provably its own.
    secret_name = models.CharField(max_length=63, unique=True)
    hint = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    # The Secret is known to be in the cluster. False only while the call that makes it runs (the
    # repair pass deletes what a call that never finished may have left, as its values are gone).
    applied = models.BooleanField(default=False)
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    rotated_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rotated_at = models.DateTimeField(null=True, blank=True)

    objects = TeamCredentialQuerySet.as_manager()

    class Meta:
        ordering = ["team", "name"]
        indexes = [models.Index(fields=["applied", "state"], name="team_credential_unfinished")]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="team_credential_name_unique")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"


class EndpointKey(models.Model):
    """A key a program sends (`Authorization: Bearer gpk_…`) to call a server its team serves (an
    inference server) without a person's session. Shown once when made; only its SHA-256 and the
    first characters (to tell keys apart) are kept. Revoked keys stay listed, for the trail."""

    PREFIX = "gpk_"

    workload = models.ForeignKey("Workload", on_delete=models.CASCADE, related_name="endpoint_keys")
    name = models.CharField(max_length=60)
    shown = models.CharField(max_length=16, help_text="Its first characters, to tell keys apart.")
    sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.shown}… ({self.name})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None
