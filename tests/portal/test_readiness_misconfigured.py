"""A site pointed at the wrong database or an unreachable Redis: readiness fails with the reason
in the log (and only the error's class in the answer), the process keeps running; a URL that is
not a URL stops the start with a sentence that names the setting, never the password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens on port 1 of loopback: both connections are refused at once.
WRONG = {"DATABASE_URL": "postgres://portal:s3cret@127.0.0.1:1/portal", "REDIS_URL": "redis://127.0.0.1:1/0",
         "PORTAL_READINESS_BROKER_TIMEOUT": "1", "LOG_FORMAT": "text"}
PROBE = (
    "import django; django.setup()\n"
    "from django.test import Client\n"
    "for _ in range(2):\n"  # asked twice: the process answers again, it does not die
    "    r = Client().get('/readyz'); print(r.status_code, r.content.decode())\n"
    "from django.core.management import call_command\n"
    "try:\n"
    "    call_command('readiness')\n"
    "except SystemExit as e:\n"
    "    print('exit', e.code)\n"
    "except Exception as e:\n"
    "    print('refused', e)\n"
)


def run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(argv, cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_wrong_database_and_an_unreachable_redis_fail_readiness_with_the_reason_logged(tmp_path):
    done = run({**WRONG, "PORTAL_VAR_DIR": str(tmp_path)}, [sys.executable, "-c", PROBE])

    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert [line[:3] for line in answers[:2]] == ["503", "503"]
    assert "database: did not answer (OperationalError)" in answers[0]
    assert "broker: did not accept a connection (OperationalError)" in answers[0]
    assert "127.0.0.1" not in answers[0] and "s3cret" not in done.stdout
    assert answers[2].startswith("refused not ready: database: did not answer")  # the exec probe's command
    [logged, *_] = [line for line in done.stderr.splitlines() if "Not ready:" in line]
    assert "database: did not answer (OperationalError: connection" in logged and "check DATABASE_URL" in logged
    assert "broker: did not accept a connection (OperationalError:" in logged and "check REDIS_URL" in logged
    assert "s3cret" not in done.stderr


def test_a_database_url_that_is_not_one_stops_the_start_naming_the_setting_not_the_password(tmp_path):
    done = run({"DATABASE_URL": "postgress://portal:s3cret@db:5432/portal", "PORTAL_VAR_DIR": str(tmp_path)},
               [sys.executable, "manage.py", "check"])

    assert done.returncode != 0
    assert "DATABASE_URL is not a database URL: its scheme “postgress” is not postgres" in done.stderr
    assert "s3cret" not in done.stderr
