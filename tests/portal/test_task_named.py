"""Services enqueue tasks by name (portal.tasks.task_named); a process that has not loaded the
tasks modules yet (the web process, at its first launches) loads them on the first ask."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_eight_threads_asking_at_once_in_a_fresh_process_all_get_the_task(tmp_path):
    """Celery marks the loading begun before it ends: a thread asking while another loads was
    answered without the task, so the web process's first concurrent launches failed (5 of 8 here
    before the lock). A fresh process, because this one has long loaded them."""
    script = textwrap.dedent("""
        import threading

        import django

        django.setup()
        from portal.tasks import task_named

        errors = []

        def ask():
            try:
                task_named("jobs.tasks.workload_submit")
            except Exception as error:  # what a launch would have raised
                errors.append(repr(error))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(len(errors), errors[:1])
    """)
    # The embedded defaults, as `make demo`'s web process has them: nothing of the suite's environment.
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)),
           "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []"
