"""Who may call the ``/v1/*`` routes: ``AUTH_MODE`` ``iam`` (the default), ``api_key``, ``jwt`` or ``none``.

- ``iam``: the Function URL's ``AWS_IAM`` auth type has authenticated the caller before the function runs;
  the function trusts it and checks nothing.
- ``api_key``: a request carries a key as ``Authorization: Bearer <key>`` (what the OpenAI SDKs send) or as
  ``x-api-key: <key>``. The keys live in an SSM SecureString or a Secrets Manager secret named by
  ``API_KEYS_PARAMETER``, read through Powertools Parameters and cached for ``API_KEYS_MAX_AGE_S``; for
  local runs ``API_KEYS=k1,k2`` adds keys from the environment. A missing or wrong key is a 401 in the
  OpenAI error shape, before anything is sent upstream. Behind an API Gateway REST front
  (``API_KEY_SOURCE=gateway``, set by the template with ``Front=RestApi``) API Gateway has checked the
  ``x-api-key`` against its own keys and usage plan before the function runs (a missing or wrong one is its
  403, a caller past the plan's rate its 429); the function trusts that check, and the request's caller is
  API Gateway's key id (:class:`sagestream.http.Request`), which the invocation record logs. A request
  without an ``x-api-key`` header, or an event without the id of the key API Gateway checked, did not pass
  such a check and is refused as a missing key.
- ``jwt``: a request carries the caller's own sign-in as ``Authorization: Bearer <JWT>``, verified against
  the OpenID Connect issuer ``JWT_ISSUER`` (see :mod:`sagestream.identity`, imported in this mode only).
- ``none``: anyone with the URL may call; a warning is logged at init.

``API_KEYS_PARAMETER`` is the name of an SSM parameter or of a Secrets Manager secret: an ARN says which;
so do the prefixes ``ssm:`` and ``secretsmanager:``; a bare name is looked up in SSM first and, if SSM has
no such parameter, in Secrets Manager (the store that answered is remembered). The value is a JSON list of
keys, a JSON object whose values are the keys (``{"alice": "...", "ci": "..."}``, the names for the
operator only), or keys separated by commas, whitespace or newlines.

Keys are compared in constant time: the SHA-256 of the presented key against that of every key, each
with :func:`hmac.compare_digest`, none skipped, so neither timing nor length tells which key came close.

Environment variables read: none directly (see :mod:`sagestream.config`); boto3 reads the usual AWS ones.

Example::

    >>> auth = Authenticator(Config(endpoint_name="llm", auth_mode="api_key", api_keys=("sk-local-1",)))
    >>> auth.check({"authorization": "Bearer sk-local-1"})
    >>> auth.check({"x-api-key": "nope"})
    Traceback (most recent call last):
    ...
    sagestream.errors.APIError: Invalid API key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sagestream.config import Config
from sagestream.errors import APIError

if TYPE_CHECKING:
    from sagestream.identity import Identity, JwtVerifier

logger = logging.getLogger(__name__)

Store = Literal["ssm", "secretsmanager"]


class KeySource(Protocol):
    """Where the keys come from: a Powertools Parameters provider (``get`` caches for ``max_age``)."""

    def get(self, name: str, max_age: int | None = ..., **kwargs: Any) -> Any: ...


def store_of(parameter: str) -> tuple[Store | None, str]:
    """Which store ``API_KEYS_PARAMETER`` names (``None``: a bare name, SSM first), and the name to ask for."""
    for prefix, store in (("secretsmanager:", "secretsmanager"), ("ssm:", "ssm")):
        if parameter.startswith(prefix):
            return store, parameter.removeprefix(prefix)  # type: ignore[return-value]
    if parameter.startswith("arn:") and ":secretsmanager:" in parameter:
        return "secretsmanager", parameter
    if parameter.startswith("arn:") and ":ssm:" in parameter:
        return "ssm", parameter
    return None, parameter


def requires_key(path: str) -> bool:
    """The OpenAI routes need a key; ``/health`` and the chat page do not."""
    return path == "/v1" or path.startswith("/v1/")


def parse_keys(value: str | bytes | None) -> tuple[str, ...]:
    """The keys in a parameter's or secret's value (a JSON list or object, or separated text)."""
    if value is None:
        return ()
    text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return tuple(str(k).strip() for k in data if str(k).strip())
        if isinstance(data, dict):
            return tuple(str(k).strip() for k in data.values() if str(k).strip())
    return tuple(k for k in stripped.replace(",", " ").split() if k)


def key_names(value: str | bytes | None) -> dict[str, str]:
    """The operator's name of each key, where the value is a JSON object (``{"alice": "<key>"}``)."""
    text = value.decode("utf-8") if isinstance(value, bytes) else str(value or "")
    if not text.strip().startswith("{"):
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return {str(k).strip(): str(n) for n, k in data.items() if str(k).strip()} if isinstance(data, dict) else {}


def presented_keys(headers: Mapping[str, str]) -> list[str]:
    """The keys a request offers: the ``Authorization`` bearer token and the ``x-api-key`` header."""
    keys: list[str] = []
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        keys.append(token.strip())
    api_key = headers.get("x-api-key", "").strip()
    if api_key:
        keys.append(api_key)
    return keys


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def matches(presented: Iterable[str], digests: Iterable[bytes]) -> bool:
    """Whether any presented key is one of the keys: every pair compared, in constant time each."""
    wanted = list(digests)
    found = False
    for key in presented:
        offered = _digest(key)
        for digest in wanted:
            found |= hmac.compare_digest(offered, digest)
    return found


class Authenticator:
    """The access check of one execution environment (made once, at init; keys fetched when needed)."""

    def __init__(self, config: Config, sources: Mapping[Store, KeySource] | None = None) -> None:
        self.mode = config.auth_mode
        self.gateway_checked = config.auth_mode == "api_key" and config.api_key_source == "gateway"
        self.max_age_s = config.api_keys_max_age_s
        self.parameter = config.api_keys_parameter
        self._store, self._name = store_of(self.parameter or "")
        self._local = tuple(_digest(k) for k in config.api_keys)
        self._sources: dict[Store, KeySource] = dict(sources or {})
        self._names: dict[bytes, str] = {}  # a key's digest: its name in the parameter's JSON object
        self._checked: tuple[bytes, ...] = self._local  # the digests the last check compared against
        self.verifier: JwtVerifier | None = None
        if self.mode == "jwt":
            from sagestream.identity import JwtVerifier  # PyJWT and cryptography: this mode's init only

            self.verifier = JwtVerifier(config)
        if self.mode == "none":
            logger.warning("AUTH_MODE=none: anyone who has the function URL can call the model endpoint")

    def check(self, headers: Mapping[str, str], gateway_key_id: str | None = None) -> Identity | None:
        """Return if the request may go on (with the caller's identity, in ``jwt`` mode); raise :class:`APIError`
        (401, 403 for a token without a required scope, 500 or 503 if the keys can't be read).
        ``gateway_key_id``: the id of the key API Gateway checked, from the event (``API_KEY_SOURCE=gateway``)."""
        if self.verifier is not None:
            return self.verifier.check(headers)
        if self.mode != "api_key":
            return None
        if self.gateway_checked:
            # API Gateway has compared the key and says which one in the event (requestContext.identity.apiKeyId);
            # an event without that id, or a request without the header, came some other way.
            if not headers.get("x-api-key", "").strip() or not gateway_key_id:
                raise APIError.unauthorized("Missing API key. Send it as an 'x-api-key' header.")
            return None
        presented = presented_keys(headers)
        if not presented:
            raise APIError.unauthorized(
                "Missing API key. Send it as 'Authorization: Bearer <key>' or as an 'x-api-key' header."
            )
        if not matches(presented, self._digests()):
            raise APIError.unauthorized("Invalid API key.")
        return None

    def matched_key(self, headers: Mapping[str, str]) -> tuple[str, str | None] | None:
        """The key a request that passed :meth:`check` carries (``api_key`` mode, keys the function holds): its
        SHA-256 in hex and its name, where the keys are named; None in other modes. The keys are those the check
        read (nothing is fetched again: the check has passed, and a fetch could fail now)."""
        if self.mode != "api_key" or self.gateway_checked:
            return None
        digests = set(self._checked)
        for key in presented_keys(headers):
            digest = _digest(key)
            if digest in digests:
                return digest.hex(), self._names.get(digest)
        return None

    def _digests(self) -> tuple[bytes, ...]:
        if self.parameter is None:
            return self._local
        try:
            value = self._fetch()
        except Exception as exc:
            # Parameters caches only what it fetched: the next request tries again.
            logger.error("could not read the API keys from %s: %s", self.parameter, exc)
            raise APIError.internal("The server could not check the API key.") from exc
        keys = parse_keys(value)
        self._names = {_digest(k): n for k, n in key_names(value).items()}
        if not keys:
            logger.error("%s holds no API keys: every request will be refused", self.parameter)
        self._checked = self._local + tuple(_digest(k) for k in keys)
        return self._checked

    def _fetch(self) -> Any:
        if self._store == "secretsmanager":
            return self._source("secretsmanager").get(self._name, max_age=self.max_age_s)
        try:
            return self._source("ssm").get(self._name, max_age=self.max_age_s, decrypt=True)
        except Exception as exc:
            if self._store == "ssm" or not _not_found(exc):
                raise
        value = self._source("secretsmanager").get(self._name, max_age=self.max_age_s)
        self._store = "secretsmanager"  # found there: don't ask SSM again
        return value

    def _source(self, store: Store) -> KeySource:
        if store not in self._sources:  # made once per execution environment, on first use
            self._sources[store] = _provider(store)
        return self._sources[store]


def _not_found(exc: BaseException) -> bool:
    """Whether SSM said there is no such parameter (Powertools wraps the botocore error)."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "response", {}).get("Error", {}).get("Code")
        if code in ("ParameterNotFound", "ValidationException") or "ParameterNotFound" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _provider(store: Store) -> KeySource:
    from aws_lambda_powertools.utilities import parameters
    from botocore.config import Config as BotoConfig

    # The keys gate every request: a slow parameter store must fail fast, not hold the caller.
    boto_config = BotoConfig(connect_timeout=2, read_timeout=3, retries={"mode": "standard", "max_attempts": 2})
    if store == "secretsmanager":
        return parameters.SecretsProvider(boto_config=boto_config)
    return parameters.SSMProvider(boto_config=boto_config)
