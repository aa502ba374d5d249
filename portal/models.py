"""What every app shares: people, API tokens, the audit trail and notifications."""

from __future__ import annotations

import hashlib

from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.db import models
from django.db.models import Q
from django.utils import timezone


class User(AbstractUser):
    """A person. Platform roles live here; team roles live on memberships."""

    is_platform_admin = models.BooleanField(
        default=False, help_text="Manages flavors, capacity, templates and teams; sees everything."
    )
    is_finance = models.BooleanField(default=False, help_text="Reads all usage and cost.")

    # The user's teams and role in each (team id -> role), and the teams of the departments they
    # head, cached per request by tenants.models._team_access; not a column.
    _team_access: tuple[dict[int, str], frozenset[int]]

    class Meta:
        ordering = ["username"]

    @property
    def display_name(self) -> str:
        return self.get_full_name() or self.username


class SsoIdentity(models.Model):
    """Who the identity provider says a user is: its issuer and subject, the one pair an
    OpenID provider promises never to reassign. Usernames and emails change and collide, so
    single sign-on finds its account by this pair alone, and only accounts it created have one.
    """

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    # When the provider last vouched for the user's groups (a login, a silent session refresh or
    # the revalidation check); roles older than OIDC_REVALIDATE_AFTER are due to be confirmed again.
    confirmed_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When revalidation last took the group-derived roles of an unconfirmed user away.
    demoted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A secret for scripts and CLIs. Only its SHA-256 is stored; the secret is shown once."""

    PREFIX_LENGTH = 8

    class Scope(models.TextChoices):
        READ = "read", "Read only"
        WRITE = "write", "Read and write"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=PREFIX_LENGTH, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(
        max_length=10, choices=Scope.choices, default=Scope.WRITE,
        help_text="A read-only token may only make GET, HEAD and OPTIONS calls.",
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def digest_of(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= timezone.now():
            return "expired"
        return "active"


class AuditEvent(models.Model):
    """One state change, told as a sentence. Kept when its object or team is deleted."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150, help_text="Kept when the account is deleted.")
    action = models.CharField(max_length=60, db_index=True, help_text="e.g. quota_request.approved")
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=64)
    # A plain id, not a foreign key: the trail outlives the team.
    team_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team_id", "-created_at"])]

    def __str__(self) -> str:
        return self.message


class NotificationQuerySet(models.QuerySet["Notification"]):
    def for_user(self, user: User | AnonymousUser) -> NotificationQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(recipient=user)

    def unread(self) -> NotificationQuerySet:
        return self.filter(read_at__isnull=True)


class Notification(models.Model):
    recipient = models.ForeignKey(User, on_delete=models.CASCADE, related_name="notifications")
    created_at = models.DateTimeField(default=timezone.now)
    message = models.TextField()
    url = models.CharField(max_length=300, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["recipient", "read_at"])]

    def __str__(self) -> str:
        return self.message


class Heartbeat(models.Model):
    """The last sign of life of a background process (worker, beat, watcher), for readiness, and
    the end of the last team pass (`team-pass`), for the team page; all exported on /metrics.

    In the database because it is the one thing every process of a site shares, embedded or not.
    """

    name = models.CharField(max_length=40, unique=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"
