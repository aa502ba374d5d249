"""A small but real OpenID provider on loopback: authorization code flow, RS256 ID tokens,
JWKS and userinfo. Enough to log in through mozilla-django-oidc end to end."""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


class MockOpenIDProvider:
    def __init__(self, *, client_id: str, client_secret: str) -> None:
        self.client_id, self.client_secret = client_id, client_secret
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key"
        self.next_user: dict[str, Any] = {}
        # No live session at the provider: a silent (prompt=none) request answers login_required.
        self.signed_out = False
        # Claims the userinfo endpoint answers on top of the user's, to play a misbehaving provider.
        self.userinfo_overrides: dict[str, Any] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.access_tokens: dict[str, dict[str, Any]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def settings(self) -> dict[str, Any]:
        return {
            "OIDC_RP_CLIENT_ID": self.client_id,
            "OIDC_RP_CLIENT_SECRET": self.client_secret,
            "OIDC_RP_SIGN_ALGO": "RS256",
            "OIDC_RP_SCOPES": "openid email profile groups",
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.url}/authorize",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.url}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.url}/userinfo",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.url}/jwks",
            "OIDC_OP_ISSUER": self.url,
        }

    def __enter__(self) -> MockOpenIDProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [dict(public, kid=self.kid, use="sig", alg="RS256")]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/authorize":
                    if query.get("client_id") != provider.client_id or query.get("response_type") != "code":
                        return self._json(400, {"error": "invalid_request"})
                    if query.get("prompt") == "none" and provider.signed_out:
                        params = {"error": "login_required", "state": query["state"]}
                        self.send_response(302)
                        self.send_header("Location", f"{query['redirect_uri']}?{urlencode(params)}")
                        self.end_headers()
                        return None
                    code = secrets.token_urlsafe(16)
                    provider.codes[code] = {"nonce": query.get("nonce"), "user": provider.next_user}
                    target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.end_headers()
                elif url.path == "/jwks":
                    self._json(200, provider._jwks())
                elif url.path == "/userinfo":
                    token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    user = provider.access_tokens.get(token)
                    if user is None:
                        return self._json(401, {"error": "invalid_token"})
                    self._json(200, {**user, **provider.userinfo_overrides})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if self.path != "/token":
                    return self._json(404, {"error": "not_found"})
                length = int(self.headers.get("Content-Length", "0"))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if form.get("client_id") != provider.client_id or form.get("client_secret") != provider.client_secret:
                    return self._json(401, {"error": "invalid_client"})
                grant = provider.codes.pop(form.get("code", ""), None)
                if grant is None:
                    return self._json(400, {"error": "invalid_grant"})
                now = int(time.time())
                id_token = jwt.encode(
                    {"iss": provider.url, "sub": grant["user"]["sub"], "aud": provider.client_id, "iat": now,
                     "exp": now + 300, "nonce": grant["nonce"]},
                    provider.key, algorithm="RS256", headers={"kid": provider.kid},
                )
                access_token = secrets.token_urlsafe(16)
                provider.access_tokens[access_token] = grant["user"]
                self._json(200, {"access_token": access_token, "id_token": id_token, "token_type": "Bearer", "expires_in": 300})

        return Handler
