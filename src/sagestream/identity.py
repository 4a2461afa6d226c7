"""``AUTH_MODE=jwt``: the caller's own identity, a JWT from an OpenID Connect issuer, verified in the function.

A Function URL cannot check a JWT itself (its auth type is ``NONE`` or ``AWS_IAM``), so the function does
what API Gateway's JWT authorizer does: the request carries ``Authorization: Bearer <JWT>``; the token must
be signed by one of the issuer's keys with an asymmetric algorithm, be within ``exp``/``nbf``/``iat`` (a
small leeway for clock skew), name the issuer (``iss``) and one of the audiences (``aud``, or ``client_id``
for Cognito's access tokens, which carry no ``aud``), and hold every required scope (``scope`` or ``scp``).

The keys: the issuer's OpenID discovery document names its JWKS; both are fetched at init and kept for
``JWT_JWKS_MAX_AGE_S``. A token whose ``kid`` is not among them makes one refetch (key rotation needs no
redeploy), at most one fetch per ``JWT_JWKS_REFETCH_S`` whatever the tokens say, so a stream of made-up
``kid`` values cannot turn the function against the issuer. Keys that cannot be fetched fail closed: a 503
while there are no current keys, never an unchecked request.

Verification is PyJWT's (with ``cryptography``): the most used JOSE library for Python, small, and its
``decode`` takes the allowed algorithms as a required list and binds a JWK to its own algorithm, which
closes the ``alg: none`` and HMAC-with-a-public-key confusions by construction. joserfc would serve too,
but it is larger and newer, with nothing needed here that PyJWT lacks. PyJWT's own ``PyJWKClient`` is not
used: it refetches on every unknown ``kid`` with no rate limit and knows nothing of discovery; fetching
two small JSON documents with ``urllib`` is the little protocol code left.

This module is imported only with ``AUTH_MODE=jwt``, and it imports PyJWT and ``cryptography``: the other
modes' cold start does not pay for them.

Environment variables read: none directly (see :mod:`sagestream.config`).

Example::

    >>> verifier = JwtVerifier(Config(endpoint_name="llm", auth_mode="jwt", jwt_issuer="https://id.example",
    ...     jwt_audience=("app",)), fetch=lambda url: {})                                    # doctest: +SKIP
    >>> verifier.verify("eyJ...").sub                                                          # doctest: +SKIP
    'user-123'
"""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt

from sagestream.config import Config
from sagestream.errors import APIError

logger = logging.getLogger(__name__)

# Asymmetric algorithms only: never `none`, never HMAC (whose "secret" would be the issuer's public key).
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
# Clock skew between the issuer and Lambda that is forgiven on exp, nbf and iat.
LEEWAY_S = 30
FETCH_TIMEOUT_S = 3.0
# The most a whole fetch (discovery or JWKS) may take, and so the most a request waits for fresh keys: an issuer
# that answers a byte a second would otherwise keep every read under FETCH_TIMEOUT_S and never end.
FETCH_DEADLINE_S = 5.0
# A discovery document or a JWKS is a few kilobytes; more is not one.
MAX_DOCUMENT_BYTES = 1 << 20

Fetch = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class Identity:
    """Who called: the token's subject, and the client and user name where the token carries them."""

    sub: str
    client_id: str | None = None
    username: str | None = None
    groups: tuple[str, ...] = ()  # the token's cognito:groups (or groups) claim: what per-group quotas match

    def log_fields(self) -> dict[str, str]:
        fields = {"caller": self.sub}
        if self.client_id:
            fields["caller_client_id"] = self.client_id
        if self.username:
            fields["caller_username"] = self.username
        return fields


class KeysUnavailable(Exception):
    """The issuer's keys could not be fetched and none are current: nothing can be verified."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: the issuer's documents are where its URL and its discovery say, and a 302 to
    another origin or scheme (http) would hand the choice of the keys to whoever answers there."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirects)


def fetch_json(url: str, deadline_s: float = FETCH_DEADLINE_S) -> Any:
    """One JSON document over HTTP(S): each read within a timeout, the whole body within ``deadline_s``, no
    redirect followed (the keys gate every request: a slow or moved issuer fails fast)."""
    ends = time.monotonic() + deadline_s
    request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310 (scheme checked)
    body = bytearray()
    with _OPENER.open(request, timeout=FETCH_TIMEOUT_S) as response:
        while len(body) <= MAX_DOCUMENT_BYTES:
            if time.monotonic() > ends:
                raise TimeoutError(f"{url} did not answer whole within {deadline_s} s")
            piece = response.read1(65536)
            if not piece:
                break
            body += piece
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    return json.loads(body)


def is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in ("127.0.0.1", "::1", "localhost")


def check_issuer_url(url: str, name: str = "JWT_ISSUER") -> None:
    """``https``, or ``http`` on loopback (the local issuer); a ``ValueError`` naming the setting otherwise."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback(url):
        return
    raise ValueError(f"{name}={url!r} must be an https URL (http only for a loopback issuer, in local runs)")


class SigningKeys:
    """The issuer's public keys by ``kid``, from its discovery document and JWKS, refetched when due.

    ``max_age_s``: how long fetched keys are current. ``refetch_s``: the least time between two fetches,
    whatever asks for them (an unknown ``kid``, keys past their age, a failed fetch).
    """

    def __init__(
        self,
        issuer: str,
        *,
        max_age_s: float,
        refetch_s: float,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.max_age_s = max_age_s
        self.refetch_s = refetch_s
        self.fetch = fetch
        self.clock = clock
        self.metadata: Mapping[str, Any] = {}
        self.fetches = 0
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = -math.inf
        self._tried_at = -math.inf
        # Guards the fields above and _fetching; never held across I/O.
        self._lock = threading.Lock()
        # The fetch under way (on a thread of its own) and when it began: requests wait for it, each at most
        # FETCH_DEADLINE_S, and a fetch that outlived two deadlines is given up on (a new one may start).
        self._fetching: tuple[threading.Event, float] | None = None

    def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key a token names (None: no such key, even after a refetch); :class:`KeysUnavailable`."""
        found = self._current(kid)
        if found is not None:
            return found
        self._refetch(kid)
        if not self._keys or self.clock() - self._fetched_at >= self.max_age_s:
            raise KeysUnavailable(f"no current signing keys from {self.issuer}")
        return self._find(kid)

    def _refetch(self, kid: str | None) -> None:
        """Start a fetch if one is due (or join the one under way) and wait for it, at most FETCH_DEADLINE_S.

        Concurrent invocations (Lambda Managed Instances) each wait with their own deadline on the one fetch; no
        lock is held while it runs, so a slow issuer holds up nobody past that deadline."""
        with self._lock:
            if self._current(kid) is not None:
                return  # another request's fetch brought it meanwhile
            now = time.monotonic()
            fetching = self._fetching
            if fetching is None or now - fetching[1] > 2 * FETCH_DEADLINE_S:
                if self.clock() - self._tried_at < self.refetch_s:
                    return
                self._tried_at = self.clock()
                fetching = self._fetching = (threading.Event(), now)
                threading.Thread(target=self._fetch, args=(fetching,), name="jwks-fetch", daemon=True).start()
        fetching[0].wait(FETCH_DEADLINE_S)

    def _fetch(self, fetching: tuple[threading.Event, float]) -> None:
        try:
            self.refresh()
        finally:
            with self._lock:
                if self._fetching is fetching:
                    self._fetching = None
            fetching[0].set()

    def _current(self, kid: str | None) -> jwt.PyJWK | None:
        if self.clock() - self._fetched_at >= self.max_age_s:
            return None
        return self._find(kid)

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        keys = self._keys
        if kid is None:  # a token may omit kid when the issuer has one key
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def refresh(self) -> bool:
        """Fetch discovery and the JWKS now; keep the old keys (to their age) when that fails."""
        self._tried_at = self.clock()
        self.fetches += 1
        try:
            metadata = self.fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if not isinstance(metadata, dict) or metadata.get("issuer") != self.issuer:
                # OpenID discovery: the document must name the very issuer it was fetched for.
                raise ValueError("the discovery document names another issuer")
            jwks_uri = str(metadata.get("jwks_uri") or "")
            check_issuer_url(jwks_uri, "jwks_uri")
            jwks = self.fetch(jwks_uri)
            keys = _signing_keys(jwks)
        except Exception as exc:
            logger.error("could not fetch the signing keys of %s: %s", self.issuer, exc)
            return False
        with self._lock:
            self.metadata, self._keys, self._fetched_at = metadata, keys, self.clock()
        return True


def _signing_keys(jwks: Any) -> dict[str, jwt.PyJWK]:
    """The JWKS's signature keys of an asymmetric algorithm, by ``kid``; the others are left out."""
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ValueError("the JWKS has no 'keys' list")
    keys: dict[str, jwt.PyJWK] = {}
    for data in jwks["keys"]:
        if not isinstance(data, dict) or data.get("use", "sig") != "sig" or data.get("kty") == "oct":
            continue
        try:
            key = jwt.PyJWK(data)
        except jwt.PyJWKError:
            continue  # a key type or curve this verifier does not know: it cannot sign anything accepted
        if key.algorithm_name in ASYMMETRIC_ALGORITHMS:
            keys[str(data.get("kid") or "")] = key
    if not keys:
        raise ValueError("the JWKS holds no usable signing key")
    return keys


def refused(message: str) -> APIError:
    """A 401: no token, or one that is not good; the message names no key and no claim value."""
    return APIError(
        401,
        message,
        type="authentication_error",
        code="invalid_token",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def bearer_token(headers: Mapping[str, str]) -> str:
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise APIError(
            401,
            "Missing bearer token. Send your sign-in's access token as 'Authorization: Bearer <token>'.",
            type="authentication_error",
            code="invalid_token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return token.strip()


class JwtVerifier:
    """The token check of one execution environment: made once at init, keys fetched then and when due."""

    def __init__(self, config: Config, *, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic):
        assert config.jwt_issuer is not None
        self.issuer = config.jwt_issuer
        self.audiences = frozenset(config.jwt_audience)
        self.required_scopes = frozenset(config.jwt_required_scopes)
        self.keys = SigningKeys(
            self.issuer,
            max_age_s=config.jwt_jwks_max_age_s,
            refetch_s=config.jwt_jwks_refetch_s,
            fetch=fetch,
            clock=clock,
        )
        if not self.keys.refresh():  # at init: no fetch on the request path until a kid is new or keys age
            logger.error("AUTH_MODE=jwt: no signing keys yet; requests get a 503 until %s answers", self.issuer)

    def page_sign_in(self, client_id: str | None) -> dict[str, str] | None:
        """What the chat page needs to sign in with the authorization code and PKCE (no secret), from the
        issuer's discovery document; None without a page client id, or before discovery has answered."""
        endpoints = ("authorization_endpoint", "token_endpoint", "end_session_endpoint")
        metadata = self.keys.metadata
        if client_id is None or not metadata.get("authorization_endpoint") or not metadata.get("token_endpoint"):
            return None
        scope = " ".join(dict.fromkeys(("openid", *sorted(self.required_scopes))))
        found = {name: str(metadata[name]) for name in endpoints if isinstance(metadata.get(name), str)}
        if "end_session_endpoint" not in found and (urlsplit(self.issuer).hostname or "").startswith("cognito-idp."):
            # Cognito publishes no end_session_endpoint: its sign-in domain signs out at /logout (logout_uri).
            domain = urlsplit(found["authorization_endpoint"])
            found["end_session_endpoint"] = f"{domain.scheme}://{domain.netloc}/logout"
        return {"client_id": client_id, "scope": scope, "issuer": self.issuer, **found}

    def check(self, headers: Mapping[str, str]) -> Identity:
        return self.verify(bearer_token(headers))

    def verify(self, token: str) -> Identity:
        """The token's :class:`Identity`, or an :class:`APIError` (401, 403 without a scope, 503 without keys)."""
        header = _unverified_header(token)
        if header is None:
            raise refused("The bearer token is not a JWT.")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
            raise refused("The token's signing algorithm is not accepted (only asymmetric ones are).")
        kid = header.get("kid")
        try:
            key = self.keys.key(kid if isinstance(kid, str) else None)
        except KeysUnavailable:
            raise APIError(
                503,
                "The server could not fetch the keys to check the token.",
                type="server_error",
                code="jwks_unavailable",
            ) from None
        if key is None:
            raise refused("The token is signed with a key the issuer does not publish.")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=sorted(ASYMMETRIC_ALGORITHMS),
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "sub"], "verify_aud": False},
            )
        except jwt.ExpiredSignatureError:
            raise refused("The token has expired.") from None
        except jwt.ImmatureSignatureError:
            raise refused("The token is not valid yet.") from None
        except jwt.InvalidIssuerError:
            raise refused("The token was not issued by the issuer this endpoint trusts.") from None
        except jwt.MissingRequiredClaimError as exc:
            raise refused(f"The token has no '{exc.claim}' claim.") from None
        except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError):
            raise refused("The token's signature is not valid.") from None
        except jwt.InvalidTokenError:
            raise refused("The token is not valid.") from None
        if not self._for_us(claims):
            raise refused("The token is not meant for this endpoint (audience).")
        missing = self.required_scopes - _scopes(claims)
        if missing:
            needed = " ".join(sorted(self.required_scopes))
            raise APIError(
                403,
                f"The token lacks a required scope; this endpoint needs: {needed}.",
                type="permission_error",
                code="insufficient_scope",
                headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{needed}"'},
            )
        if not isinstance(claims["sub"], str) or not claims["sub"]:
            raise refused("The token's 'sub' claim is not a string.")
        return Identity(
            sub=claims["sub"],
            client_id=_text(claims.get("client_id") or claims.get("azp")),
            username=_text(
                claims.get("username") or claims.get("cognito:username") or claims.get("preferred_username")
            ),
            groups=_groups(claims),
        )

    def _for_us(self, claims: Mapping[str, Any]) -> bool:
        """Whether the token names one of our audiences; a claim of the wrong type names none (never a 500)."""
        aud = claims.get("aud")
        if aud is not None:
            listed = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            return any(isinstance(a, str) and a in self.audiences for a in listed)
        # Cognito's access tokens name the app client instead of an audience.
        client_id = claims.get("client_id")
        return isinstance(client_id, str) and client_id in self.audiences


def _unverified_header(token: str) -> dict[str, Any] | None:
    """The JOSE header, read only to pick the key (``jwt.decode`` then checks the whole token). Not PyJWT's
    ``get_unverified_header``: that decodes and checks all three segments, and ``decode`` does it all again,
    which was half the CPU of a verification."""
    segment = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, TypeError, RecursionError):  # RecursionError: a header nested thousands deep
        return None
    return header if isinstance(header, dict) else None


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """``scope`` (OAuth 2.0's space-separated string) or ``scp`` (Entra ID and Okta: a list or a string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(str(v) for v in value)
    return frozenset(found)


def _groups(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """Cognito's ``cognito:groups``, or the ``groups`` claim other issuers use: its strings, in order."""
    value = claims.get("cognito:groups", claims.get("groups"))
    listed = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(g for g in listed if isinstance(g, str) and g)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
