"""The issuer's keys fetched over a real loopback socket (issue 32's probe): an issuer that answers a byte a second
once the keys have aged costs each request at most the fetch deadline, a 503 and never the function's
timeout, and concurrent requests wait each with its own deadline rather than on a lock the slow fetch holds; a
JWKS that answers a redirect is not followed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.identity import FETCH_DEADLINE_S, JwtVerifier
from sagestream_local.oidc import LocalIssuer


class Issuer(ThreadingHTTPServer):
    """Discovery and a JWKS on loopback: served whole, a byte a second (``slow``), or redirected elsewhere."""

    daemon_threads = True

    def __init__(self, keys: LocalIssuer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.keys = keys
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.mode = "whole"
        self.redirect_to = ""
        self.paths: list[str] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    server: Issuer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        server = self.server
        server.paths.append(self.path)
        if self.path.endswith("/openid-configuration"):
            body = json.dumps({**server.keys.discovery(), "issuer": server.url, "jwks_uri": server.url + "/jwks"})
        elif server.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", server.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        else:
            body = json.dumps(server.keys.jwks())
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if server.mode != "slow" or self.path.endswith("/openid-configuration"):
            self.wfile.write(data)
            return
        for byte in data[:30]:  # far slower than any deadline: it never ends in time
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(1.0)


@pytest.fixture
def served() -> Iterator[tuple[Issuer, LocalIssuer]]:
    keys = LocalIssuer()  # its signing keys only; never started
    issuer = Issuer(keys)
    yield issuer, keys
    issuer.shutdown()
    keys.stop()


def verifier(issuer: Issuer, keys: LocalIssuer) -> JwtVerifier:
    config = Config(
        endpoint_name="llm",
        auth_mode="jwt",
        jwt_issuer=issuer.url,
        jwt_audience=(keys.audience,),
        jwt_jwks_max_age_s=1,
        jwt_jwks_refetch_s=0,
    )
    return JwtVerifier(config)


def token(issuer: Issuer, keys: LocalIssuer) -> str:
    return keys.sign({**keys.access_claims("alice"), "iss": issuer.url})


def test_a_jwks_answering_a_byte_a_second_costs_each_request_the_deadline_and_a_503(
    served: tuple[Issuer, LocalIssuer],
) -> None:
    issuer, keys = served
    checker = verifier(issuer, keys)
    assert checker.verify(token(issuer, keys)).sub
    time.sleep(1.2)  # the keys age
    issuer.mode = "slow"
    outcomes: list[tuple[int, float]] = []

    def one() -> None:
        started = time.monotonic()
        try:
            checker.verify(token(issuer, keys))
            outcomes.append((200, time.monotonic() - started))
        except APIError as err:
            outcomes.append((err.status, time.monotonic() - started))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [status for status, _ in outcomes] == [503] * 4
    assert all(took < FETCH_DEADLINE_S + 3 for _, took in outcomes), outcomes  # never the function's timeout


def test_a_jwks_redirect_is_not_followed(served: tuple[Issuer, LocalIssuer]) -> None:
    issuer, keys = served
    elsewhere = Issuer(keys)  # another origin serving the very keys: following the redirect would verify
    try:
        issuer.mode, issuer.redirect_to = "redirect", elsewhere.url + "/jwks"
        checker = verifier(issuer, keys)  # its init fetch meets the redirect
        with pytest.raises(APIError) as caught:
            checker.verify(token(issuer, keys))
        assert (caught.value.status, caught.value.code) == (503, "jwks_unavailable")
        assert issuer.paths.count("/jwks") >= 1 and elsewhere.paths == []
    finally:
        elsewhere.shutdown()
