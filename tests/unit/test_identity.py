"""AUTH_MODE=jwt's token check, without a socket: the local issuer's keys and documents, fetched through a
counting stand-in for urllib, and a clock the tests move."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.identity import JwtVerifier, SigningKeys
from sagestream_local.oidc import LocalIssuer, SigningKey

# One verifier for the fuzz examples (its init fetches the keys once).
FUZZED: dict[str, JwtVerifier] = {}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Documents:
    """The issuer's discovery document and JWKS by URL, as urllib would fetch them; counts each fetch."""

    def __init__(self, issuer: LocalIssuer) -> None:
        self.issuer = issuer
        self.fetched: list[str] = []
        self.down = False

    def __call__(self, url: str) -> Any:
        self.fetched.append(url.removeprefix(self.issuer.url))
        if self.down:
            raise OSError("connection refused")
        if url == self.issuer.url + "/.well-known/openid-configuration":
            return self.issuer.discovery()
        if url == self.issuer.url + "/jwks":
            return self.issuer.jwks()
        raise AssertionError(url)

    @property
    def jwks_fetches(self) -> int:
        return self.fetched.count("/jwks")


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    made = LocalIssuer()  # bound to a loopback port for its URL; never started: nothing here uses a socket
    yield made
    made.stop()


def verifier_for(issuer: LocalIssuer, clock: Clock | None = None, **settings: Any) -> tuple[JwtVerifier, Documents]:
    config = Config(
        endpoint_name="llm",
        auth_mode="jwt",
        jwt_issuer=issuer.url,
        jwt_audience=settings.pop("jwt_audience", (issuer.audience,)),
        jwt_required_scopes=(issuer.scope,),
        jwt_jwks_refetch_s=10,
        **settings,
    )
    documents = Documents(issuer)
    return JwtVerifier(config, fetch=documents, clock=clock or Clock()), documents


def refusal(verifier: JwtVerifier, token: str) -> APIError:
    with pytest.raises(APIError) as caught:
        verifier.verify(token)
    return caught.value


def b64(data: dict[str, Any] | bytes) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_good_token_names_its_caller_and_the_keys_came_once_at_init(issuer: LocalIssuer) -> None:
    verifier, documents = verifier_for(issuer)
    identity = verifier.verify(issuer.access_token("alice"))
    assert identity.sub.startswith("local-") and identity.client_id == issuer.client_id
    assert identity.username == "alice"
    verifier.verify(issuer.access_token("bob"))
    assert documents.fetched == ["/.well-known/openid-configuration", "/jwks"]


def test_a_cognito_access_token_names_the_client_instead_of_an_audience(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer, jwt_audience=(issuer.client_id,))
    assert verifier.verify(issuer.access_token(aud=None)).client_id == issuer.client_id
    wrong = refusal(verifier, issuer.access_token(aud=None, client_id="another-app"))
    assert wrong.status == 401 and "audience" in wrong.message


def test_scopes_may_come_as_scp_lists(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer)
    assert verifier.verify(issuer.access_token(scope=None, scp=["openid", issuer.scope])).sub


def test_a_token_without_the_scope_is_403_naming_the_scope_needed(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer)
    err = refusal(verifier, issuer.access_token(scope="openid"))
    assert (err.status, err.type, err.code) == (403, "permission_error", "insufficient_scope")
    assert err.headers["WWW-Authenticate"] == f'Bearer error="insufficient_scope", scope="{issuer.scope}"'


def test_an_unknown_kid_refetches_once_then_is_refused_and_refetches_are_rate_limited(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier, documents = verifier_for(issuer, clock)
    stranger = SigningKey.new()
    clock.now += 11
    err = refusal(verifier, issuer.sign(issuer.access_claims("alice"), key=stranger))
    assert err.status == 401 and "key" in err.message
    assert documents.jwks_fetches == 2
    for _ in range(5):  # within the refetch period: no more fetches, whatever kids the tokens name
        refusal(verifier, issuer.sign(issuer.access_claims("alice"), key=SigningKey.new()))
    assert documents.jwks_fetches == 2
    clock.now += 11
    refusal(verifier, issuer.sign(issuer.access_claims("alice"), key=stranger))
    assert documents.jwks_fetches == 3


def test_a_rotated_key_is_accepted_after_one_refetch(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier, documents = verifier_for(issuer, clock)
    clock.now += 11
    issuer.rotate()
    assert verifier.verify(issuer.access_token("alice")).username == "alice"
    assert documents.jwks_fetches == 2
    verifier.verify(issuer.access_token("bob"))
    assert documents.jwks_fetches == 2


def test_keys_past_their_age_are_refetched_and_an_issuer_that_is_down_fails_closed(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier, documents = verifier_for(issuer, clock, jwt_jwks_max_age_s=60)
    token = issuer.access_token("alice")
    clock.now += 61
    documents.down = True
    err = refusal(verifier, token)
    assert (err.status, err.code) == (503, "jwks_unavailable")
    assert refusal(verifier, token).status == 503  # and the next one does not wait on the issuer again
    assert documents.fetched.count("/.well-known/openid-configuration") == 2
    documents.down = False
    clock.now += 11
    assert verifier.verify(token).username == "alice"


def test_an_issuer_down_at_init_fails_closed_until_it_answers(issuer: LocalIssuer) -> None:
    clock = Clock()
    documents = Documents(issuer)
    documents.down = True
    config = Config(endpoint_name="llm", auth_mode="jwt", jwt_issuer=issuer.url, jwt_audience=(issuer.audience,))
    verifier = JwtVerifier(config, fetch=documents, clock=clock)
    assert refusal(verifier, issuer.access_token()).status == 503
    documents.down = False
    clock.now += 10
    assert verifier.verify(issuer.access_token()).sub


def test_a_discovery_document_naming_another_issuer_is_not_trusted(issuer: LocalIssuer) -> None:
    keys = SigningKeys(
        issuer.url, max_age_s=60, refetch_s=0, fetch=lambda url: {**issuer.discovery(), "issuer": "https://evil"}
    )
    assert keys.refresh() is False


def test_an_hmac_key_in_the_jwks_is_never_used() -> None:
    jwks = {"keys": [{"kty": "oct", "k": b64(b"secret"), "kid": "h"}]}
    keys = SigningKeys(
        "http://127.0.0.1:1",
        max_age_s=60,
        refetch_s=0,
        fetch=lambda url: (
            jwks if url.endswith("/jwks") else {"issuer": "http://127.0.0.1:1", "jwks_uri": "http://127.0.0.1:1/jwks"}
        ),
    )
    assert keys.refresh() is False


def _hs256_with_public_key(issuer: LocalIssuer) -> str:
    # The classic confusion: the issuer's public key, as PEM, used as an HMAC secret.
    from cryptography.hazmat.primitives import hmac as crypto_hmac
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    pem = issuer.keys[0].private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    signing_input = (
        f"{b64({'alg': 'HS256', 'typ': 'JWT', 'kid': issuer.keys[0].kid})}.{b64(issuer.access_claims('alice'))}"
    )
    mac = crypto_hmac.HMAC(pem, SHA256())
    mac.update(signing_input.encode())
    return f"{signing_input}.{b64(mac.finalize())}"


def _tampered_payload(issuer: LocalIssuer) -> str:
    header, _, signature = issuer.access_token("alice").split(".")
    return f"{header}.{b64({**issuer.access_claims('alice'), 'sub': 'someone-else'})}.{signature}"


def _tampered_signature(issuer: LocalIssuer) -> str:
    token = issuer.access_token("alice")
    last = "A" if token[-1] != "A" else "B"
    return token[:-1] + last


REFUSALS = {
    "expired": lambda i: i.access_token(exp=1_000_000, iat=999_000, nbf=999_000),
    "not yet valid": lambda i: i.access_token(nbf=4_000_000_000, iat=4_000_000_000, exp=4_000_000_600),
    "wrong issuer": lambda i: i.access_token(iss="https://other-issuer.example"),
    "wrong audience": lambda i: i.access_token(aud="someone-elses-api"),
    "no sub": lambda i: i.access_token(sub=None),
    "alg none": lambda i: f"{b64({'alg': 'none', 'kid': i.keys[0].kid})}.{b64(i.access_claims('alice'))}.",
    "HS256 with the public key": _hs256_with_public_key,
    "tampered payload": _tampered_payload,
    "tampered signature": _tampered_signature,
    "garbage": lambda i: "not-a-jwt",
    # Issue 32's probe: header fields and claims of the wrong type were used before their types were checked.
    "alg a list": lambda i: f"{b64({'alg': ['RS256'], 'kid': i.keys[0].kid})}.{b64(i.access_claims('alice'))}.x",
    "alg an object": lambda i: f"{b64({'alg': {'a': 1}})}.{b64(i.access_claims('alice'))}.x",
    "header nested 10,000 deep": lambda i: f"{b64(b'[' * 10_000 + b']' * 10_000)}.{b64({})}.x",
    "aud a list of lists": lambda i: i.access_token(aud=[["x"]]),
    "client_id a list": lambda i: i.access_token(aud=None, client_id=["x"]),
    "client_id an object": lambda i: i.access_token(aud=None, client_id={"x": 1}),
    "sub an object": lambda i: i.access_token(sub={"id": 1}),
}


@pytest.mark.parametrize("make", REFUSALS.values(), ids=REFUSALS.keys())
def test_each_bad_token_is_a_401_that_names_no_claim_value(issuer: LocalIssuer, make: Any) -> None:
    verifier, _ = verifier_for(issuer)
    token = make(issuer)
    err = refusal(verifier, token)
    assert (err.status, err.type, err.code) == (401, "authentication_error", "invalid_token")
    assert err.headers["WWW-Authenticate"].startswith("Bearer")
    for value in ("other-issuer", "someone-elses-api", "someone-else", issuer.keys[0].kid, token):
        assert value not in err.message


def test_another_issuers_token_with_the_same_kid_is_refused(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer)
    impostor = SigningKey(issuer.keys[0].kid, SigningKey.new().private)
    err = refusal(verifier, issuer.sign(issuer.access_claims("alice"), key=impostor))
    assert err.status == 401 and "signature" in err.message


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer   ", "Basic abc", "bearer"])
def test_a_missing_or_empty_bearer_is_401(issuer: LocalIssuer, header: str) -> None:
    verifier, _ = verifier_for(issuer)
    with pytest.raises(APIError) as caught:
        verifier.check({"authorization": header} if header else {})
    assert caught.value.status == 401 and caught.value.code == "invalid_token"


def test_the_page_is_told_the_endpoints_and_scope_and_nothing_secret(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer)
    assert verifier.page_sign_in(None) is None
    sign_in = verifier.page_sign_in("page-client")
    assert sign_in == {
        "client_id": "page-client",
        "scope": f"openid {issuer.scope}",
        "issuer": issuer.url,
        "authorization_endpoint": issuer.url + "/authorize",
        "token_endpoint": issuer.url + "/token",
        "end_session_endpoint": issuer.url + "/logout",
    }


def test_pyjwt_refuses_none_and_hmac_by_itself_too(issuer: LocalIssuer) -> None:
    """The allow-list is PyJWT's, not only this module's: a JWK binds its own algorithm."""
    key = jwt.PyJWK(issuer.keys[0].jwk())
    with pytest.raises(jwt.InvalidAlgorithmError):
        jwt.decode(_hs256_with_public_key(issuer), key, algorithms=["RS256", "HS256"], options={"verify_aud": False})


def test_a_cognito_pool_signs_out_on_its_sign_in_domain() -> None:
    """Cognito's discovery document has no end_session_endpoint; its hosted UI's /logout is the way out."""
    pool = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"
    domain = "https://example.auth.us-east-1.amazoncognito.com"
    discovery = {
        "issuer": pool,
        "jwks_uri": pool + "/.well-known/jwks.json",
        "authorization_endpoint": domain + "/oauth2/authorize",
        "token_endpoint": domain + "/oauth2/token",
    }
    jwks = {"keys": [SigningKey.new().jwk()]}
    config = Config(endpoint_name="llm", auth_mode="jwt", jwt_issuer=pool, jwt_audience=("client",))
    verifier = JwtVerifier(config, fetch=lambda url: jwks if url.endswith("jwks.json") else discovery)
    sign_in = verifier.page_sign_in("client")
    assert sign_in is not None and sign_in["end_session_endpoint"] == domain + "/logout"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.binary(max_size=300), payload=st.binary(max_size=300), signature=st.binary(max_size=100))
def test_any_bytes_in_any_segment_are_a_401_never_another_exception(
    issuer: LocalIssuer, header: bytes, payload: bytes, signature: bytes
) -> None:
    verifier = FUZZED.get("verifier") or FUZZED.setdefault("verifier", verifier_for(issuer)[0])
    for token in (f"{b64(header)}.{b64(payload)}.{b64(signature)}", f"{b64(header)}.{b64(payload)}"):
        assert refusal(verifier, token).status == 401


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit"]), JSON_VALUES, max_size=4))
def test_any_json_header_is_a_401_never_another_exception(issuer: LocalIssuer, header: dict[str, Any]) -> None:
    verifier = FUZZED.get("verifier") or FUZZED.setdefault("verifier", verifier_for(issuer)[0])
    token = f"{b64(header)}.{b64(issuer.access_claims('alice'))}.{b64(b'sig')}"
    assert refusal(verifier, token).status == 401


def test_a_tokens_groups_are_its_cognito_groups_or_groups_claim(issuer: LocalIssuer) -> None:
    verifier, _ = verifier_for(issuer)
    assert verifier.verify(issuer.access_token("alice", **{"cognito:groups": ["pro", "staff"]})).groups == (
        "pro",
        "staff",
    )
    assert verifier.verify(issuer.access_token("alice", groups="batch")).groups == ("batch",)
    # A claim of the wrong shape names no group (never a 500); the quota then is the default's.
    assert verifier.verify(issuer.access_token("alice", groups={"a": 1})).groups == ()
    assert verifier.verify(issuer.access_token("alice", groups=["ok", 3, ""])).groups == ("ok",)
