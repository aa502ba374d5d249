"""In-app notifications (the bell) and the matching email, sent only after commit."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from portal.models import Notification, User

log = logging.getLogger(__name__)


def notify(*, recipients: Iterable[User], message: str, url: str = "", subject: str | None = None,
           email: bool = True) -> list[Notification]:
    """The bell for each active recipient and, unless `email` is False (people who asked for a
    digest instead), the same sentence by email after commit."""
    people = {user.pk: user for user in recipients if user.is_active}
    created = Notification.objects.bulk_create(
        [Notification(recipient=user, message=message, url=url) for user in people.values()]
    )
    addresses = [user.email for user in people.values() if user.email] if email else []
    if addresses:
        body = f"{message}\n\n{settings.SITE_URL}{url}" if url else message
        email_after_commit(subject=subject or message, body=body, addresses=addresses)
    return created


def email_after_commit(*, subject: str, body: str, addresses: list[str]) -> None:
    """Sends an email once the transaction commits; a failure is logged, never raised."""
    transaction.on_commit(lambda: _send_email(subject, body, addresses))


def _send_email(subject: str, body: str, addresses: list[str]) -> None:
    # A mail server that is down must not undo the change the mail is about.
    try:
        send_mail(f"[GPU Portal] {subject[:120]}", body, None, addresses)
    except Exception:
        log.exception("could not send notification email to %d recipients", len(addresses))


def notifications_mark_read(*, user: User, notification_id: int | None = None) -> int:
    """Marks one of the user's notifications read, or all of them when no id is given."""
    unread = Notification.objects.for_user(user).unread()
    if notification_id is not None:
        unread = unread.filter(pk=notification_id)
    return unread.update(read_at=timezone.now())


def notifications_mark_read_about(*, user: User, url: str) -> int:
    """Marks read the user's notifications that point at a page they have now opened however
    they got there (a link in an email, the team page): having seen it is having read it."""
    return Notification.objects.for_user(user).unread().filter(url=url).update(read_at=timezone.now())


def notifications_resolve(*, url: str) -> int:
    """Marks read everyone's unread notifications that point at `url`: what they asked of their
    readers is done (a quota request was decided or withdrawn), so it no longer waits in any bell."""
    return Notification.objects.filter(url=url, read_at__isnull=True).update(read_at=timezone.now())
