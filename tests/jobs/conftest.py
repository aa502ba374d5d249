"""What the tests of jobs share beyond tests/conftest.py: a Jupyter server that says how idle it is."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class JupyterStatus:
    """Answers /api/status like a Jupyter server, with the activity the test sets."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.tokens: list[str] = []
        # A notebook whose name is a key here gets this answer (HTTP status, body) instead.
        self.answers: dict[str, tuple[int, bytes]] = {}
        # A notebook whose name is a key here answers only after this many seconds.
        self.delays: dict[str, float] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.tokens.append(self.path.split("token=")[-1])
                code, data = 200, json.dumps(owner.status).encode()
                for name, seconds in owner.delays.items():
                    if f"/{name}/" in self.path:
                        time.sleep(seconds)
                for name, answer in owner.answers.items():
                    if f"/{name}/" in self.path:
                        code, data = answer
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{{namespace}}/{{name}}/api/status"


@pytest.fixture
def jupyter(settings):
    server = JupyterStatus()
    settings.PORTAL_NOTEBOOK_STATUS_URL = server.url
    yield server
    server.httpd.shutdown()
