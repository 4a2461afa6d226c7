"""A small OpenID Connect issuer on loopback, so that ``AUTH_MODE=jwt`` runs on a laptop with no cloud account.

It speaks the real protocol the function and the chat page meet at Cognito, Auth0 or Entra ID: a discovery
document, a JWKS, an authorize endpoint with a login form, a token endpoint for the authorization code with
PKCE (S256 only, required) and for refresh tokens, an end-session endpoint, and key rotation on demand (``POST
/rotate``, or :meth:`LocalIssuer.rotate`): the new key signs from then on and the JWKS publishes it beside
the previous one, as real issuers do. Tokens are RS256 JWTs signed with PyJWT.

Written by hand because no maintained Python package is a small embeddable OIDC provider: the full ones
(oidc-provider in Node, Keycloak, pyop) are servers with their own storage and configuration, far more than
a loopback stand-in needs; the token formats themselves are PyJWT's.

Never deployed, loopback only. One client, public (no secret): ``client_id``; its redirect URIs are
registered with :meth:`LocalIssuer.allow_redirect` (the local stack registers its page's URL).

Example::

    >>> with LocalIssuer() as issuer:                                           # doctest: +SKIP
    ...     token = issuer.access_token("alice")
    ...     print(issuer.url, issuer.audience)
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "sagestream-local-page"
AUDIENCE = "sagestream-local"
SCOPE = "sagestream/invoke"
# The local users and their passwords (a laptop stand-in: printed by `make run`).
USERS = {"alice": "alice-password", "bob": "bob-password"}
CODE_TTL_S = 60


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey

    @classmethod
    def new(cls) -> SigningKey:
        return cls(secrets.token_hex(8), rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        return {**data, "kid": self.kid, "use": "sig", "alg": "RS256"}


@dataclass(frozen=True, slots=True)
class Grant:
    """What an authorization code stands for until the token endpoint redeems it (once)."""

    username: str
    redirect_uri: str
    challenge: str
    nonce: str | None
    scope: str
    expires: float


class LocalIssuer:
    def __init__(
        self,
        *,
        port: int = 0,
        client_id: str = CLIENT_ID,
        audience: str = AUDIENCE,
        scope: str = SCOPE,
        users: Mapping[str, str] | None = None,
        token_ttl_s: int = 300,
    ) -> None:
        self.client_id = client_id
        self.audience = audience
        self.scope = scope
        self.users = dict(users or USERS)
        self.token_ttl_s = token_ttl_s
        self.keys = [SigningKey.new()]  # the first signs; the one after it is the previous, still published
        self.redirect_uris: set[str] = set()
        self.requests: list[str] = []  # each request's path, in order (tests count the JWKS fetches)
        self._grants: dict[str, Grant] = {}
        self._refresh: dict[str, tuple[str, str]] = {}  # refresh token -> (username, scope)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def allow_redirect(self, uri: str) -> None:
        self.redirect_uris.add(uri)

    def start(self) -> LocalIssuer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-oidc-issuer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve_forever that was never started
            self._server.shutdown()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LocalIssuer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- keys and tokens ---

    def rotate(self) -> str:
        """A new signing key; the JWKS keeps the previous one beside it. Returns the new ``kid``."""
        with self._lock:
            self.keys = [SigningKey.new(), self.keys[0]]
            return self.keys[0].kid

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.jwk() for key in self.keys]}

    def sign(self, claims: Mapping[str, Any], *, key: SigningKey | None = None, headers: Mapping[str, Any] = {}) -> str:
        """``claims`` as an RS256 JWT signed with ``key`` (the current signing key by default)."""
        key = key or self.keys[0]
        return jwt.encode(dict(claims), key.private, algorithm="RS256", headers={"kid": key.kid, **headers})

    def access_claims(self, username: str, scope: str | None = None) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.url,
            "sub": _subject(username),
            "aud": self.audience,
            "client_id": self.client_id,
            "username": username,
            "scope": self.scope if scope is None else scope,
            "iat": now,
            "nbf": now,
            "exp": now + self.token_ttl_s,
            "jti": secrets.token_hex(8),
        }

    def access_token(self, username: str = "alice", scope: str | None = None, **claims: Any) -> str:
        """A signed access token for ``username``; ``claims`` override any claim (None drops it)."""
        merged = {**self.access_claims(username, scope), **claims}
        return self.sign({k: v for k, v in merged.items() if v is not None})

    def _tokens(self, username: str, scope: str, nonce: str | None) -> dict[str, Any]:
        now = int(time.time())
        id_claims = {
            "iss": self.url,
            "sub": _subject(username),
            "aud": self.client_id,
            "preferred_username": username,
            "iat": now,
            "exp": now + self.token_ttl_s,
            **({"nonce": nonce} if nonce else {}),
        }
        refresh = secrets.token_urlsafe(32)
        self._refresh[refresh] = (username, scope)
        return {
            "access_token": self.access_token(username, scope),
            "id_token": self.sign(id_claims),
            "refresh_token": refresh,
            "token_type": "Bearer",
            "expires_in": self.token_ttl_s,
            "scope": scope,
        }

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": self.url + "/authorize",
            "token_endpoint": self.url + "/token",
            "end_session_endpoint": self.url + "/logout",
            "jwks_uri": self.url + "/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": ["openid", *self.scope.split()],
        }

    # --- the authorization code flow ---

    def authorize(self, params: Mapping[str, str]) -> tuple[int, str | None, str]:
        """Check an authorize request; (status, redirect to or None, page). With ``username`` it is the form's."""
        redirect_uri = params.get("redirect_uri", "")
        if params.get("client_id") != self.client_id or redirect_uri not in self.redirect_uris:
            # Never redirect to a URI that is not registered: show the error here.
            return 400, None, _page("Unknown client or redirect URI.")
        state = params.get("state", "")

        def back(**answer: str) -> tuple[int, str, str]:
            query = urlencode({**answer, **({"state": state} if state else {})})
            return 302, f"{redirect_uri}{'&' if '?' in redirect_uri else '?'}{query}", ""

        if params.get("response_type") != "code":
            return back(error="unsupported_response_type")
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            return back(error="invalid_request", error_description="PKCE with S256 is required")
        username = params.get("username")
        if username is None:
            return 200, None, _login_form(params)
        if not secrets.compare_digest(self.users.get(username, "\0"), params.get("password", "")):
            return 401, None, _login_form(params, error="Wrong user name or password.")
        code = secrets.token_urlsafe(24)
        scope = " ".join(s for s in params.get("scope", "").split() if s == "openid" or s in self.scope.split())
        with self._lock:
            self._grants[code] = Grant(
                username,
                redirect_uri,
                params["code_challenge"],
                params.get("nonce"),
                scope,
                time.monotonic() + CODE_TTL_S,
            )
        return back(code=code)

    def token(self, form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != self.client_id:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") == "refresh_token":
            with self._lock:
                found = self._refresh.pop(form.get("refresh_token", ""), None)  # one use: rotated
            if found is None:
                return 400, {"error": "invalid_grant"}
            return 200, self._tokens(*found, nonce=None)
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self._grants.pop(form.get("code", ""), None)  # a code is redeemed once
        if grant is None or grant.expires < time.monotonic() or grant.redirect_uri != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if not secrets.compare_digest(digest, grant.challenge):
            return 400, {"error": "invalid_grant", "error_description": "code_verifier does not match"}
        return 200, self._tokens(grant.username, grant.scope, grant.nonce)

    def cors_origin(self, origin: str | None) -> str | None:
        """The page origins that may call the token endpoint: those of the registered redirect URIs."""
        allowed = {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in self.redirect_uris}
        return origin if origin in allowed else None


def _subject(username: str) -> str:
    return "local-" + hashlib.sha256(username.encode()).hexdigest()[:16]


def _page(message: str) -> str:
    return f"<!doctype html><title>sagestream local sign-in</title><p>{html.escape(message)}</p>"


def _login_form(params: Mapping[str, str], error: str = "") -> str:
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in params.items()
        if k not in ("username", "password")
    )
    return (
        "<!doctype html><meta charset=utf-8><title>sagestream local sign-in</title>"
        "<h1>Sign in to sagestream (local issuer)</h1>"
        + (f'<p role="alert">{html.escape(error)}</p>' if error else "")
        + '<form method="post" action="/authorize">'
        + hidden
        + '<label>User name <input name="username" id="username" autocomplete="username"></label> '
        '<label>Password <input name="password" id="password" type="password" autocomplete="current-password">'
        '</label> <button type="submit" id="sign-in">Sign in</button></form>'
    )


def _handler(issuer: LocalIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: str | bytes, content_type: str, headers: Mapping[str, str] = {}) -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("cache-control", "no-store")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, payload: Any, headers: Mapping[str, str] = {}) -> None:
            self._send(status, json.dumps(payload), "application/json", headers)

        def _form(self) -> dict[str, str]:
            length = int(self.headers.get("content-length") or 0)
            text = self.rfile.read(length).decode("utf-8", "replace")
            return {k: v[0] for k, v in parse_qs(text).items()}

        def _cors(self) -> dict[str, str]:
            origin = issuer.cors_origin(self.headers.get("origin"))
            return {"access-control-allow-origin": origin, "vary": "origin"} if origin else {}

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            issuer.requests.append(parts.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if parts.path == "/.well-known/openid-configuration":
                self._json(200, issuer.discovery(), self._cors())
            elif parts.path == "/jwks":
                self._json(200, issuer.jwks(), self._cors())
            elif parts.path == "/authorize":
                self._authorize({k: v for k, v in query.items() if k not in ("username", "password")})
            elif parts.path == "/logout":
                target = query.get("post_logout_redirect_uri", "")
                if target in issuer.redirect_uris:
                    self._send(302, b"", "text/plain", {"location": target})
                else:
                    self._send(200, _page("Signed out."), "text/html; charset=utf-8")
            else:
                self._send(404, _page("Not found."), "text/html; charset=utf-8")

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            issuer.requests.append(path)
            if path == "/authorize":
                self._authorize(self._form())
            elif path == "/token":
                status, payload = issuer.token(self._form())
                self._json(status, payload, self._cors())
            elif path == "/rotate":
                self._json(200, {"kid": issuer.rotate()})
            else:
                self._send(404, _page("Not found."), "text/html; charset=utf-8")

        def do_OPTIONS(self) -> None:
            cors = self._cors()
            if cors:
                cors |= {"access-control-allow-methods": "GET, POST", "access-control-allow-headers": "content-type"}
            self._send(HTTPStatus.NO_CONTENT, b"", "text/plain", cors)

        def _authorize(self, params: dict[str, str]) -> None:
            status, location, page = issuer.authorize(params)
            if location is not None:
                self._send(status, b"", "text/plain", {"location": location})
            else:
                self._send(status, page, "text/html; charset=utf-8")

    return Handler
