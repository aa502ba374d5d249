"""How long ago something happened, in words that stay true while the page stays open."""

from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

register = template.Library()


def ago_text(value: dt.datetime, *, now: dt.datetime | None = None) -> str:
    """"3 minutes ago"; under a minute, or a moment the server's clock has not reached yet
    (a cluster's clock a little ahead), "just now" rather than "0 minutes ago"."""
    now = now or timezone.now()
    if (now - value).total_seconds() < 60:
        return "just now"
    return f"{timesince(value, now, depth=1)} ago"


@register.filter
def after(later: dt.datetime | None, earlier: dt.datetime) -> str:
    """How long after `earlier` (the launch) `later` (the end) came, in words: "under a minute"
    rather than Django's "0 minutes" for a 30-second run."""
    if later is None:
        return ""
    if (later - earlier).total_seconds() < 60:
        return "under a minute"
    return timesince(earlier, later, depth=2)


@register.filter
def ago(value: dt.datetime | None) -> SafeString | str:
    """A `<time>` element: portal.js rewrites its words every half minute, so a page left open
    does not keep saying "just now" about something long past; the exact moment is its title."""
    if value is None:
        return ""
    return format_html('<time datetime="{}" title="{}" data-ago>{}</time>', value.isoformat(),
                       timezone.localtime(value).strftime("%Y-%m-%d %H:%M"), ago_text(value))
