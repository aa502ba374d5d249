"""The people of benchmarks/load_pages.py, for locust: each simulated user is one signed-in person
(a member, a lead or finance, with the session cookie and the pages their role uses, from the JSON
file LOAD_PAGES_PEOPLE names), who fetches one of their pages at random and then thinks for
LOAD_PAGES_THINK seconds ("1.0,3.0": uniform between the two). A response other than 200 is a
failure (a redirect to the login page included). The run stops once LOAD_PAGES_MAX_REQUESTS
requests have been made, or at locust's --run-time, whichever comes first.

Run by load_pages.py (`locust --headless ... --csv ... --html ...`); not a test module."""

from __future__ import annotations

import itertools
import json
import os
import random
from typing import Any

from locust import FastHttpUser, between, events, task

with open(os.environ["LOAD_PAGES_PEOPLE"], encoding="utf-8") as listed:
    PEOPLE: list[dict[str, Any]] = json.load(listed)
THINK = tuple(float(part) for part in os.environ.get("LOAD_PAGES_THINK", "1.0,3.0").split(","))
MAX_REQUESTS = int(os.environ.get("LOAD_PAGES_MAX_REQUESTS", "0")) or None
COOKIE = os.environ.get("LOAD_PAGES_COOKIE", "sessionid")
NEXT_PERSON = itertools.cycle(range(len(PEOPLE)))
made = 0


@events.request.add_listener
def count(**_: Any) -> None:
    global made
    made += 1


class Person(FastHttpUser):
    wait_time = between(*THINK)

    def on_start(self) -> None:
        self.person = PEOPLE[next(NEXT_PERSON)]
        self.headers = {"Cookie": f"{COOKIE}={self.person['cookie']}"}

    @task
    def page(self) -> None:
        if MAX_REQUESTS is not None and made >= MAX_REQUESTS:
            self.environment.runner.quit()
            return
        name, path = random.choice(self.person["pages"])
        with self.client.get(path, name=name, headers=self.headers, allow_redirects=False,
                             catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}")
