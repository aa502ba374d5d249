"""Driving Debian's Chromium with Playwright: the launch options this machine needs, logging in
through the real form, and waiting for htmx to settle."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Playwright's sync API runs an event loop in this thread; Django would refuse ORM calls under it.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright import sync_api as sync_api  # noqa: E402 - after the environment above; the tests use it from here

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
PASSWORD = "correct horse battery staple"
SHOTS = Path("/tmp/shots")


def log_in(browser: Any, live_server: Any, username: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    # The dashboard, or for someone whose only role is finance the finance overview (tenants.views.landing).
    page.wait_for_url(lambda url: url.startswith(live_server.url) and "/login/" not in url and "/start/" not in url)
    return page


def htmx_settled(page) -> None:
    """Waits until htmx has finished swapping: new content is live only once it has settled,
    and a robot (unlike a person) can act within those few milliseconds."""
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')")
