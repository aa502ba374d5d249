"""Teams, memberships, the GPU flavor catalog, quota requests and the grants they give."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Prefetch, Q
from django.utils import timezone

from portal.models import User
from portal.roles import sees_all_teams
from tenants import catalog, manifests

DNS_LABEL_HELP = (
    "Lowercase letters, digits and hyphens, starting and ending with a letter or digit, "
    "at most 63 characters (a Kubernetes DNS-1123 label: it becomes the team's namespace)."
)
# How long before a temporary grant ends its team is warned, and may renew it.
GRANT_ENDING_NOTICE = dt.timedelta(days=3)
RESERVED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease", "kueue-system"}
# A RuntimeClass's name is a DNS-1123 subdomain: dot-separated labels, 253 characters at most.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
RUNTIME_CLASS_HELP = (
    "The RuntimeClass its pods run with, where the nodes' container runtime does not hand GPUs to containers by "
    "default (e.g. “nvidia” where containerd's default runtime is not NVIDIA's). Empty: the node's default runtime."
)


def validate_dns_label(value: str) -> None:
    # The value goes in as a parameter, not into the message: Django formats a validator's message
    # with its params, so a "%" the user typed in the message itself was a 500.
    RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", message=f"“%(value)s” is not a valid name. {DNS_LABEL_HELP}")(value)
    if len(value) > 63:
        raise ValidationError(f"“{value}” is {len(value)} characters long. {DNS_LABEL_HELP}")
    if value in RESERVED_NAMESPACES or value.startswith("kube-"):
        raise ValidationError(f"“{value}” is reserved by Kubernetes; choose another name.")


def four_eyes_default() -> bool:
    """Whether a new team asks for a second approver of quota (PORTAL_QUOTA_FOUR_EYES_DEFAULT, on
    unless the site says otherwise); a platform admin turns it off per team."""
    return bool(settings.PORTAL_QUOTA_FOUR_EYES_DEFAULT)


HEAD = "head"  # in `_team_access`: the team is in a department the user heads


def _team_access(user: User) -> tuple[dict[int, str], frozenset[int]]:
    """The user's teams with their role in each, and the teams of the departments they head: one
    query per request, cached on the user."""
    cached: tuple[dict[int, str], frozenset[int]] | None = getattr(user, "_team_access", None)
    if cached is None:
        rows = Membership.objects.filter(user=user).order_by().values_list("team_id", "role").union(
            Team.objects.filter(department__heads=user).order_by()
            .values_list("pk", models.Value(HEAD, output_field=models.CharField())), all=True)
        roles, headed = {}, set()
        for team_id, role in rows:
            if role == HEAD:
                headed.add(team_id)
            else:
                roles[team_id] = role
        cached = roles, frozenset(headed)
        user._team_access = cached
    return cached


def user_team_roles(user: User | AnonymousUser) -> dict[int, str]:
    """The user's teams and role in each, read once per request and cached on the user."""
    if not user.is_authenticated:
        return {}
    return _team_access(user)[0]


def headed_team_ids(user: User | AnonymousUser) -> frozenset[int]:
    """The teams in the departments the user heads (whose quota requests they may decide), read
    with their teams once per request. Heading a department is not membership: it shows its teams'
    requests, not their workloads."""
    if not user.is_authenticated:
        return frozenset()
    return _team_access(user)[1]


def forget_team_roles(user: User) -> None:
    user.__dict__.pop("_team_access", None)


# A StorageClass's name: a DNS subdomain, as the API server checks it.
STORAGE_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_VOLUME_GIB = 1_000_000


def validate_storage_quota(value: Any) -> None:
    """{storage class: whole GiB}, as the team form and the API give it."""
    if not isinstance(value, dict):
        raise ValidationError("Give the storage quota as storage class names with their GiB.")
    for name, gib in value.items():
        if not isinstance(name, str) or len(name) > 253 or not STORAGE_CLASS_NAME.match(name):
            raise ValidationError(f"“{name}” is not a storage class name (lower-case letters, digits, '-' and '.').")
        if isinstance(gib, bool) or not isinstance(gib, int) or not 0 <= gib <= MAX_VOLUME_GIB:
            raise ValidationError(f"The storage quota of {name} must be a whole number of GiB from 0 to {MAX_VOLUME_GIB:,}.")


class TeamQuerySet(models.QuerySet["Team"]):
    def for_user(self, user: User | AnonymousUser) -> TeamQuerySet:
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        return self.filter(pk__in=list(user_team_roles(user)))


WEIGHT_LIMIT = Decimal(100)
WEIGHT_INVALID = "give a number from 0 to 100, with at most two decimals, such as 1 or 2.5."


def fair_share_weight_field(help_text: str) -> models.DecimalField:
    """How much of the idle quota it competes for a team (or department) gets against the others
    (Kueue's fair sharing weight): shares converge to the weights' ratio. 0 borrows only what
    nobody else wants, and its borrowed work is the first reclaimed."""
    return models.DecimalField(
        "fair-share weight", max_digits=5, decimal_places=2, default=Decimal(1), db_default=Decimal(1),
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(WEIGHT_LIMIT)], help_text=help_text)


class Department(models.Model):
    """An optional level above teams: its teams share their idle guarantees among themselves first,
    and together lend at most `lending_limit` and borrow at most `borrowing_limit` units of each GPU
    flavor outside it. On Kueue it is a Cohort under the portal's, which its teams' queues join."""

    slug = models.CharField(max_length=40, unique=True, validators=[validate_dns_label],
                            help_text="Lowercase letters, digits and hyphens: it names the department's Cohort.")
    name = models.CharField(max_length=120, unique=True)
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many units of each GPU flavor its teams together may use of idle "
                                         "quota outside the department. Empty: no limit.")
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many units of each GPU flavor of its teams' idle guarantees may "
                                         "go to teams outside the department. Empty: all of it; 0: none leaves it.")
    fair_share_weight = fair_share_weight_field(
        "Against other departments and teams under the portal: a department of weight 2 gets twice the idle quota "
        "outside it that one of weight 1 gets, and its borrowed work is reclaimed later.")
    heads = models.ManyToManyField(User, blank=True, related_name="headed_departments",
                                   help_text="Who decides its teams' quota requests above their leads.")
    head_approves = models.BooleanField(
        default=False, db_default=False, verbose_name="Two approval levels",
        help_text="A lead's approval of a quota request from its teams passes it to a head of the department, "
                  "who decides it.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def pool_in_force(self) -> list[DepartmentPool]:
        """Its pool's rows in force: those a Prefetch(to_attr="current_pool") read, else read now."""
        prefetched: list[DepartmentPool] | None = getattr(self, "current_pool", None)
        return prefetched if prefetched is not None else list(self.pools.current().select_related("flavor"))

    @property
    def cohort(self) -> str:
        return manifests.department_cohort(root=settings.PORTAL_COHORT, slug=self.slug)

    @property
    def weight_text(self) -> str:
        return manifests.weight_quantity(self.fair_share_weight)


class Team(models.Model):
    slug = models.CharField(
        max_length=63, unique=True, validators=[validate_dns_label], help_text=DNS_LABEL_HELP
    )
    name = models.CharField(max_length=120)
    cost_center = models.CharField(max_length=60, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(User, through="Membership", related_name="teams")
    # The team's identity in the cluster, written on each of its objects as the proof that the
    # portal created them for this team. Not the primary key or the slug: both come back when a
    # team is deleted and another created (SQLite reuses ids, the slug is a person's choice), and
    # the new team must not take over what the old one left behind.
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Set for teams that existed before objects carried the uid: their labelled objects without
    # any uid are still theirs, until the first complete apply annotates them and clears this.
    adopts_unannotated = models.BooleanField(default=False, editable=False)

    # Its department, if the site has them: its queue joins the department's cohort.
    department = models.ForeignKey(Department, on_delete=models.PROTECT, null=True, blank=True, related_name="teams",
                                   help_text="Its teams share idle quota among themselves before anyone outside.")
    # Sharing policy: by default a team borrows idle capacity of the cohort and lends its own.
    may_borrow = models.BooleanField(default=True, help_text="May run on other teams' idle quota (preemptible).")
    lends_idle = models.BooleanField(default=True, help_text="Lets other teams use its idle quota until it needs it back.")
    fair_share_weight = fair_share_weight_field(
        "When teams compete for idle quota, a team of weight 3 gets three times what one of weight 1 gets, and its "
        "borrowed work is reclaimed later; 0 borrows only what nobody else wants. 0 to 100.")
    cpu_limit_cores = models.PositiveIntegerField(default=64, help_text="Backstop: CPU cores all pods may request.")
    memory_limit_gib = models.PositiveIntegerField(default=512, help_text="Backstop: memory (GiB) all pods may request.")
    pod_limit = models.PositiveIntegerField(default=100, help_text="Backstop: pods at once.")
    # GiB the team's data volumes may ask for, per StorageClass ({"standard": 500}): the namespace's
    # ResourceQuota per class. A class not named here is one members cannot make volumes of.
    storage_quota = models.JSONField(default=dict, db_default={}, blank=True, validators=[validate_storage_quota],
                                     help_text="GiB the team's data volumes may ask for, per storage class.")
    # Fairness inside the team (its lead's choice): how many physical GPUs (a slice counts its
    # fraction) one person's workloads may hold in the cluster at once; more waits in the portal
    # until that person's own work ends (jobs.services), so one burst cannot take the guarantee.
    person_gpu_limit = models.DecimalField(
        "GPUs per person", max_digits=7, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal("0.01"))],
        help_text="At most this many GPUs at once for each member (a slice counts its fraction); more of theirs waits "
                  "until their own work ends. Empty: no limit.")
    person_share_percent = models.PositiveSmallIntegerField(
        "share of the guarantee per person (%)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="At most this percent of the team's guaranteed GPUs at once for each member; with GPUs per person "
                  "too, the smaller holds. Empty: none.")
    # Four eyes on quota: every grant is seen by two people, so a lead cannot grant their own team
    # quota alone. On for new teams unless the site says otherwise; a platform admin may turn it off.
    requires_second_approver = models.BooleanField(
        default=four_eyes_default,
        help_text="Whoever files a quota request cannot approve it, not even a lead or a platform admin.",
    )

    # Cluster sync: every change bumps config_version; a reconcile that applied everything it
    # read at version N records N. In sync means applied_version == config_version.
    config_version = models.PositiveBigIntegerField(default=1)
    applied_version = models.PositiveBigIntegerField(default=0)
    synced_at = models.DateTimeField(null=True, blank=True)
    sync_error = models.TextField(blank=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def namespace(self) -> str:
        return manifests.team_object_name(prefix=settings.PORTAL_NAMESPACE_PREFIX, slug=self.slug)

    @property
    def weight_text(self) -> str:
        """Its fair-share weight as written: "3", "0.5"."""
        return manifests.weight_quantity(self.fair_share_weight)

    @property
    def cluster_queue(self) -> str:
        return manifests.team_object_name(prefix=settings.PORTAL_NAMESPACE_PREFIX, slug=self.slug)

    def clean(self) -> None:
        if self.slug and len(self.namespace) > 63:
            raise ValidationError({"slug": f"With the namespace prefix “{settings.PORTAL_NAMESPACE_PREFIX}” the namespace "
                                           f"“{self.namespace}” would be longer than 63 characters; choose a shorter slug."})

    class SyncState(models.TextChoices):
        IN_SYNC = "in_sync", "In sync"
        APPLYING = "applying", "Applying"
        ERROR = "error", "Error"

    @property
    def sync_state(self) -> str:
        if self.sync_error:
            return self.SyncState.ERROR
        if self.applied_version < self.config_version:
            return self.SyncState.APPLYING
        return self.SyncState.IN_SYNC

    @property
    def sync_state_display(self) -> str:
        return self.SyncState(self.sync_state).label


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        LEAD = "lead", "Team lead"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.get_role_display()})"


# An extended resource name: a DNS subdomain, "/", and a name of letters, digits, "-", "_" and ".".
EXTENDED_RESOURCE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
EXTENDED_RESOURCE = re.compile(EXTENDED_RESOURCE_PATTERN)
# A flavor's resource: an extended resource, or cpu for a CPU-only flavor (Flavor.clean says which where).
FLAVOR_RESOURCE_PATTERN = rf"^cpu$|{EXTENDED_RESOURCE_PATTERN}"


class Flavor(models.Model):
    """One kind of GPU capacity: a Kubernetes extended resource on labelled nodes."""

    class SharingMode(models.TextChoices):
        EXCLUSIVE = "exclusive", "Exclusive (whole GPU)"
        MIG = "mig", "MIG slice"
        TIME_SLICED = "time-sliced", "Time-sliced"
        MPS = "mps", "MPS"
        GPU_MEMORY = "gpu-memory", "Memory-sliced (per GiB)"
        VGPU = "vgpu", "vGPU (memory and core slices)"
        CPU = "cpu", "CPU only (no GPU)"

    name = models.CharField(max_length=60, unique=True, help_text="What people call it, e.g. “H100 80GB”.")
    slug = models.CharField(
        max_length=63,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "Lowercase letters, digits and hyphens.")],
        help_text="The Kueue ResourceFlavor name, e.g. “h100-80gb”.",
    )
    resource_name = models.CharField(
        max_length=120,
        validators=[
            RegexValidator(
                FLAVOR_RESOURCE_PATTERN,
                "An extended resource name with a domain, e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb (“cpu” for a "
                "CPU-only flavor).",
            )
        ],
        help_text="The Kubernetes resource pods request, e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb; cpu for a CPU-only "
                  "flavor.",
    )
    sharing_mode = models.CharField(max_length=12, choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    gpu_model = models.CharField(max_length=60, help_text="e.g. NVIDIA H100 80GB HBM3")
    # 0 on a CPU-only flavor alone: its unit is no part of a GPU (checked in clean and by the constraint).
    fraction_numerator = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(0)])
    fraction_denominator = models.PositiveSmallIntegerField(
        default=1,
        # 256: one GiB of the largest cards' memory (memory-sliced sharing prices per GiB: 1/80 of
        # an H100 80GB, 1/192 of a B200) still fits.
        validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text=(
            "One unit is numerator/denominator of a physical GPU: 1/1 whole, 1/7 a 1g MIG slice, 1/4 a GPU shared four ways, "
            "1/80 one GiB of an 80 GB card."
        ),
    )
    resource_per_unit = models.PositiveIntegerField(
        "resource per unit", default=1, db_default=1, validators=[MinValueValidator(1)],
        help_text="How much of the resource one unit asks for: 1 for a device, 6 where a unit is 6 GiB of aliyun.com/gpu-mem, "
                  "the cores of a CPU-only flavor's unit.")
    memory_gib_per_unit = models.PositiveIntegerField(
        "memory per unit (GiB)", default=0, db_default=0,
        help_text="A CPU-only flavor's unit: the memory that comes with its cores. 0 on a GPU flavor.")
    extra_resources = models.JSONField(
        "other resources per unit", default=list, blank=True, db_default=[],
        help_text='What else one unit asks for, e.g. [{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25}]; '
                  '"per_device": true where the device plugin reads the amount as each device\'s (HAMi\'s nvidia.com/gpumem).')
    capacity_units = models.PositiveIntegerField(help_text="How many units the cluster has.")
    node_labels = models.JSONField(default=dict, blank=True, help_text="Labels of the nodes that carry it.")
    tolerations = models.JSONField(default=list, blank=True, help_text="Tolerations for the taints of those nodes.")
    runtime_class_name = models.CharField(
        # db_default too: code from before this field (a web pod still running during a rolling
        # upgrade) inserts flavors without it.
        "runtime class", max_length=253, blank=True, default="", db_default="", help_text=RUNTIME_CLASS_HELP,
        validators=[RegexValidator(
            DNS_SUBDOMAIN, "A RuntimeClass name is lowercase letters, digits, “-” and “.”, starting and ending with a "
                           "letter or digit (a Kubernetes DNS-1123 subdomain), e.g. nvidia.")],
    )
    device_class_name = models.CharField(
        "device class", max_length=253, blank=True, default="", db_default="",
        help_text="A Dynamic Resource Allocation DeviceClass, e.g. gpu.nvidia.com: pods then claim that many of its devices "
                  "per unit through a ResourceClaimTemplate, and the resource is the name Kueue's deviceClassMappings give "
                  "the class. Empty: the device plugin's resource.",
        validators=[RegexValidator(
            DNS_SUBDOMAIN, "A DeviceClass name is lowercase letters, digits, “-” and “.”, starting and ending with a letter "
                           "or digit (a Kubernetes DNS-1123 subdomain), e.g. gpu.nvidia.com.")],
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What the nodes the flavor selects say, as the last node check read them (tenants/nodes.py):
    # a problem refuses launches on the flavor until a check finds it fixed; warnings only inform.
    # Written by the check alone (never by the flavor form), so an admin's save cannot clear them.
    nodes_problem = models.TextField(blank=True, default="", db_default="", editable=False)
    nodes_warnings = models.TextField(blank=True, default="", db_default="", editable=False)
    nodes_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    nodes_offered = models.PositiveIntegerField(
        null=True, blank=True, editable=False, help_text="Units its ready, schedulable nodes offered at the last node check.")

    class Meta:
        ordering = ["name"]
        constraints = [
            # One unit is numerator/denominator of a physical GPU, never more than one and never a
            # division by zero (a denominator of 0 made every page reading a fraction a 500).
            models.CheckConstraint(
                condition=(Q(fraction_numerator__gte=1, fraction_denominator__gte=1, fraction_denominator__lte=256,
                             fraction_numerator__lte=models.F("fraction_denominator"))
                           & ~Q(sharing_mode="cpu"))
                | Q(sharing_mode="cpu", fraction_numerator=0, fraction_denominator=1),
                name="flavor_fraction_of_one_gpu",
                violation_error_message="One unit is a fraction of one GPU: numerator and denominator are whole numbers "
                                        "from 1 to 256, the numerator at most the denominator (0/1 on a CPU-only "
                                        "flavor alone).",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def fraction(self) -> Fraction:
        return Fraction(self.fraction_numerator, self.fraction_denominator)

    @property
    def is_cpu(self) -> bool:
        """A CPU-only flavor: one unit is `resource_per_unit` cores and `memory_gib_per_unit` GiB on
        its nodes, no part of a GPU (fraction 0), priced per unit-hour."""
        return self.sharing_mode == self.SharingMode.CPU

    def cpu_and_memory(self, units: int) -> tuple[int, int]:
        """The cores and GiB that `units` units of a CPU-only flavor are."""
        return self.resource_per_unit * units, self.memory_gib_per_unit * units

    @property
    def unit_resources(self) -> tuple[catalog.UnitResource, ...]:
        """What one unit asks its device plugins for: its resource first, then the others."""
        return (catalog.UnitResource(self.resource_name, self.resource_per_unit),
                *(catalog.UnitResource(str(r["name"]), int(r["per_unit"]), bool(r.get("per_device")))
                  for r in self.extra_resources or []))

    def pod_requests(self, units: int) -> dict[str, int]:
        """What a pod holding `units` units writes in its requests and limits: nothing of the GPU for
        a flavor claimed through a DeviceClass (its pods claim devices; the queue counts them)."""
        if self.device_class_name or self.is_cpu:  # a CPU-only unit is the pod's CPU and memory (cpu_and_memory)
            return {}
        return catalog.pod_requests(self.unit_resources, units)

    def units_of(self, amount: int) -> int:
        """The units a pod holds that asks for `amount` of the flavor's resource."""
        return amount // self.resource_per_unit

    @property
    def nodes_warning_list(self) -> list[str]:
        return [line for line in self.nodes_warnings.splitlines() if line]

    @property
    def unit_is_a_device(self) -> bool:
        """Whether one unit is a device of its own as GPU telemetry counts devices (a GPU, a MIG
        instance); otherwise it is its fraction of a shared card (a time slice, an MPS share, a
        GiB of the card's memory)."""
        return self.sharing_mode in (self.SharingMode.EXCLUSIVE, self.SharingMode.MIG)

    @property
    def resources_display(self) -> str:
        """One unit in the words of the resources it asks for, e.g. “6 aliyun.com/gpu-mem + 25 aliyun.com/gpu-core.percentage”."""
        if self.is_cpu:
            return f"{self.resource_per_unit} CPU cores + {self.memory_gib_per_unit} GiB memory"
        return " + ".join(f"{r.amount} {r.name}{' per device' if r.per_device else ''}" for r in self.unit_resources)

    @property
    def fraction_display(self) -> str:
        if self.is_cpu:
            return "no GPU"
        return "1 GPU" if self.fraction == 1 else f"{self.fraction} GPU"

    @property
    def isolation(self) -> str:
        """What a workload on this flavor shares with its neighbours, in the launch form's words; on
        MPS, the limits the device plugin sets each client (an equal share of the card's memory and
        of its compute per replica)."""
        words = catalog.ISOLATION.get(self.sharing_mode, "")
        if self.sharing_mode == self.SharingMode.MPS:
            unit = catalog.unit_limits(gpu_model_name=self.gpu_model, resource_name=self.resource_name, fraction=self.fraction)
            words += (f" Each unit is capped at {unit.memory_mib / 1024:.3g} GiB of the GPU's memory and "
                      f"{float(self.fraction) * 100:.3g} % of its compute.")
        return words

    @property
    def attribution(self) -> str:
        """How telemetry and cost are attributed on this flavor."""
        return catalog.ATTRIBUTION.get(self.sharing_mode, "")

    def clean(self) -> None:
        name_part = self.resource_name.rpartition("/")[2]
        if len(name_part.encode()) > 63:
            raise ValidationError({"resource_name": f"The part after the “/” is {len(name_part.encode())} bytes long; "
                                                    "Kubernetes allows at most 63."})
        numerator, denominator = self.fraction_numerator, self.fraction_denominator
        # Checked before the fraction is made: a denominator of 0 is no fraction at all.
        if not isinstance(denominator, int) or denominator < 1:
            raise ValidationError({"fraction_denominator": "The denominator is a whole number of at least 1: one unit is "
                                                           "numerator/denominator of a physical GPU."})
        if self.is_cpu:
            self._clean_cpu_only()
        elif not EXTENDED_RESOURCE.fullmatch(self.resource_name):
            raise ValidationError({"resource_name": "An extended resource name with a domain, e.g. nvidia.com/gpu; cpu is "
                                                    "the resource of a CPU-only flavor alone."})
        elif self.memory_gib_per_unit:
            raise ValidationError({"memory_gib_per_unit": "Memory per unit belongs to a CPU-only flavor; a GPU flavor's "
                                                          "pods ask for their memory at launch. Leave it 0."})
        if not self.is_cpu and (not isinstance(numerator, int) or numerator < 1):
            raise ValidationError({"fraction_numerator": "The numerator is a whole number of at least 1."})
        if numerator > denominator:
            raise ValidationError({"fraction_numerator": "One unit cannot be more than one physical GPU."})
        if not isinstance(self.node_labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.node_labels.items()
        ):
            raise ValidationError({"node_labels": 'Node labels are an object of strings, e.g. {"gpu": "h100"}.'})
        if not isinstance(self.tolerations, list) or not all(isinstance(t, dict) for t in self.tolerations):
            raise ValidationError(
                {"tolerations": 'Tolerations are a list of objects, e.g. [{"key": "gpu", "operator": "Exists"}].'}
            )
        self._clean_extra_resources()
        if self.device_class_name and (self.extra_resources or self.resource_per_unit != 1):
            raise ValidationError({"device_class_name": "A unit claimed through a DeviceClass is one of its devices: it asks "
                                                        "for nothing else and for one of the resource."})

    def _clean_cpu_only(self) -> None:
        """A CPU-only flavor's unit is cores and memory on its nodes, no part of a GPU."""
        if self.resource_name != "cpu":
            raise ValidationError({"resource_name": "A CPU-only flavor's resource is cpu: one unit is cores and memory."})
        if (self.fraction_numerator, self.fraction_denominator) != (0, 1):
            raise ValidationError({"fraction_numerator": "A CPU-only flavor's unit is no part of a GPU: its fraction is "
                                                         "0/1."})
        if not isinstance(self.memory_gib_per_unit, int) or self.memory_gib_per_unit < 1:
            raise ValidationError({"memory_gib_per_unit": "A CPU-only flavor's unit comes with memory: at least 1 GiB."})
        if self.extra_resources or self.device_class_name:
            raise ValidationError({"extra_resources" if self.extra_resources else "device_class_name":
                                   "A CPU-only flavor's unit is cores and memory alone: no other resource and no "
                                   "DeviceClass."})

    def _clean_extra_resources(self) -> None:
        example = '[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25}]'
        extra = self.extra_resources
        if not isinstance(extra, list) or not all(isinstance(r, dict) for r in extra):
            raise ValidationError({"extra_resources": f"Other resources are a list of objects, e.g. {example}."})
        seen = {self.resource_name}
        for entry in extra:
            name, amount = entry.get("name"), entry.get("per_unit")
            unknown = set(entry) - {"name", "per_unit", "per_device"}
            if unknown:
                raise ValidationError({"extra_resources": f"Unknown key(s) {', '.join(sorted(unknown))}: each resource has "
                                                          "a name, per_unit and, where the plugin reads it per device, "
                                                          "per_device."})
            if not isinstance(name, str) or not EXTENDED_RESOURCE.fullmatch(name) or len(name.rpartition("/")[2]) > 63:
                raise ValidationError({"extra_resources": f"“{name}” is not an extended resource name with a domain, e.g. "
                                                          "aliyun.com/gpu-core.percentage."})
            if name in seen:
                raise ValidationError({"extra_resources": f"{name} is named twice: a unit asks for each resource once."})
            seen.add(name)
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
                raise ValidationError({"extra_resources": f"{name}: per_unit is a whole number of at least 1."})
            if not isinstance(entry.get("per_device", False), bool):
                raise ValidationError({"extra_resources": f"{name}: per_device is true or false."})


class GpuNode(models.Model):
    """A node that advertises GPUs, or that a flavor selects, as the last node check read it
    (tenants/nodes.py): what the nodes page and API show, so a page of 500 nodes costs the API
    server nothing. Written by the check alone, once a minute, only where the node changed; a
    node gone from the cluster is gone from here at the next check."""

    name = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, help_text="Its GPU labels, and those the catalog's flavors select by.")
    gpus = models.JSONField(default=dict, help_text="GPU resource -> [capacity, allocatable].")
    taints = models.JSONField(default=list)
    ready = models.BooleanField(default=False)
    cordoned = models.BooleanField(default=False)
    stack = models.JSONField(default=dict, help_text="Of the GPU stack's pods looked for (device plugin, exporter), "
                                                     "the state of the one on this node; \"none\" when there is none.")
    changed_at = models.DateTimeField(help_text="When the check last found it different.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def unhealthy(self) -> int:
        """Devices the node has but cannot hand out (allocatable below capacity), all resources."""
        return sum(max(capacity - allocatable, 0) for capacity, allocatable in self.gpus.values())


class DepartmentPoolQuerySet(models.QuerySet["DepartmentPool"]):
    def current(self) -> DepartmentPoolQuerySet:
        return self.filter(ended_at__isnull=True)


class DepartmentPool(models.Model):
    """A department's own guarantee of a GPU flavor, on top of its teams': their work runs on it
    beyond their own guarantees (borrowed, for the team), and no team outside the department may
    use it but what the department lends. Promised like a grant: capacity counts it for good.
    A change ends the row and starts another, so metering reads what was pooled in any hour
    (`billing.ledger`: borrowing is covered by pools before any team is counted as its lender);
    the rows outlive their department."""

    department = models.ForeignKey(Department, on_delete=models.SET_NULL, null=True, blank=True, related_name="pools")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="department_pools")
    units = models.PositiveIntegerField()
    valid_from = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = DepartmentPoolQuerySet.as_manager()

    class Meta:
        ordering = ["flavor__name"]
        constraints = [models.UniqueConstraint(fields=["department", "flavor"], condition=Q(ended_at__isnull=True),
                                               name="one_current_pool_per_department_flavor"),
                       models.CheckConstraint(condition=Q(units__gt=0), name="department_pool_units_positive")]

    def __str__(self) -> str:
        return f"{self.units} × {self.flavor} pooled by {self.department}"


def current_pool_prefetch() -> Prefetch[Any]:
    """Reads departments' pools in force with them, as `Department.pool_in_force` answers them."""
    return Prefetch("pools", queryset=DepartmentPool.objects.current().select_related("flavor"), to_attr="current_pool")


class QuotaRequestQuerySet(models.QuerySet["QuotaRequest"]):
    def for_user(self, user: User | AnonymousUser) -> QuotaRequestQuerySet:
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        return self.filter(team_id__in=sorted({*user_team_roles(user), *headed_team_ids(user)}))


class QuotaRequest(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quota_requests")
    requester = models.ForeignKey(User, on_delete=models.PROTECT, related_name="quota_requests")
    justification = models.TextField()
    # A reservation: quota booked ahead for a window (say, next month's deadline), checked against
    # what is already promised for every day of it, and applied and removed on time.
    starts_on = models.DateField(null=True, blank=True, help_text="First day of quota reserved ahead; empty: from approval.")
    ends_on = models.DateField(null=True, blank=True, help_text="Last day of temporary quota; empty for permanent.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    # The team's level of two (a department with `head_approves`): a lead approved, or filed it,
    # and it waits for a head of the department.
    endorsed_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    endorsed_at = models.DateTimeField(null=True, blank=True)
    endorsement_note = models.TextField(blank=True, default="", db_default="")
    # A renewal continues the temporary grants of an earlier request: approving it ends those
    # grants at that moment and starts the new ones, so the guarantee never lapses or doubles.
    renews = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="renewals",
        help_text="The approved temporary request whose grants this one continues.",
    )

    objects = QuotaRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "status"])]

    def __str__(self) -> str:
        return f"request #{self.pk}"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def head_department(self) -> Department | None:
        """Its team's department where that wants a head's approval after a lead's, else None."""
        department = self.team.department
        return department if department is not None and department.head_approves else None

    @property
    def needs_head(self) -> bool:
        return self.head_department is not None

    @property
    def waits_for_head(self) -> bool:
        """Pending, with the team's level done: only a head of the department (or a platform
        admin) decides it now."""
        return self.is_pending and self.endorsed_at is not None and self.needs_head

    @property
    def second_approver_sentence(self) -> str:
        """Why the person who filed this request cannot approve it, when the team asks for four eyes."""
        return (f"{self.team.name} asks for a second person to approve quota: someone other than "
                f"{self.requester.username}, who filed #{self.pk}, must decide.")


class QuotaRequestLine(models.Model):
    """A change to one flavor: positive to add units, negative to give them back."""

    request = models.ForeignKey(QuotaRequest, on_delete=models.CASCADE, related_name="lines")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    units = models.IntegerField()
    approved_units = models.IntegerField(
        null=True, blank=True, help_text="What the approver granted: the units asked, or fewer. Empty until approved."
    )
    endorsed_units = models.IntegerField(
        null=True, blank=True, help_text="What a lead passed on to the department's head: the units asked, or fewer.")

    class Meta:
        ordering = ["flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["request", "flavor"], name="one_line_per_flavor"),
            models.CheckConstraint(condition=~Q(units=0), name="line_units_not_zero"),
        ]

    def __str__(self) -> str:
        return f"{self.units:+d} {self.flavor}"

    @property
    def grantable(self) -> int:
        """The most that may be granted: what was asked, or what a lead passed on to the head."""
        return self.units if self.endorsed_units is None else self.endorsed_units


class QuotaGrantQuerySet(models.QuerySet["QuotaGrant"]):
    def for_user(self, user: User | AnonymousUser) -> QuotaGrantQuerySet:
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        return self.filter(team_id__in=list(user_team_roles(user)))

    def active(self, at: Any = None) -> QuotaGrantQuerySet:
        at = at or timezone.now()
        return self.filter(ended_at__isnull=True, valid_from__lte=at).filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=at)
        )


class QuotaGrant(models.Model):
    """What an approved request line gives a team. A team's guarantee is the sum of active ones."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="grants")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="grants")
    units = models.IntegerField()
    request = models.ForeignKey(QuotaRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="grants")
    valid_from = models.DateTimeField(default=timezone.now)
    valid_until = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When the portal recorded its end.")
    began_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the portal recorded its start and applied it; empty while it is reserved for a later day.")
    ending_notice_sent_at = models.DateTimeField(null=True, blank=True)

    objects = QuotaGrantQuerySet.as_manager()

    class Meta:
        ordering = ["-valid_from", "-id"]
        indexes = [models.Index(fields=["flavor", "ended_at"]), models.Index(fields=["team", "ended_at"])]

    def __str__(self) -> str:
        return f"{self.units:+d} {self.flavor} for {self.team}"

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.ended_at is None and self.valid_from <= now and (self.valid_until is None or self.valid_until > now)

    @property
    def in_renewal_window(self) -> bool:
        """A temporary grant from a request, ending within the warning window: it may be renewed."""
        return (self.is_active and self.request_id is not None and self.valid_until is not None
                and self.valid_until - timezone.now() <= GRANT_ENDING_NOTICE)

    @property
    def last_day(self) -> dt.date | None:
        """The last day the grant counts, as the request said it ("through 2026-12-14"). End
        dates are whole days in the site's time zone: `valid_until` stores the instant the grant
        stops, the midnight after that day, which metering and expiry compare against."""
        if self.valid_until is None:
            return None
        return timezone.localtime(self.valid_until - dt.timedelta(microseconds=1)).date()

