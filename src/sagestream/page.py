"""The chat page (``GET /``, with ``SERVE_UI``): one static HTML file, told what it needs, under a strict CSP.

Example::

    >>> page_policy(None).split("; ")[3]
    "connect-src 'self'"
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

__all__ = ["PAGE_HEADERS", "page_policy", "serve"]


PAGE_HEADERS: dict[str, str] = {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "content-security-policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
}


def page_policy(sign_in: Mapping[str, str] | None) -> str:
    """The page's CSP with the issuer's origins it needs to sign in: its token endpoint (``fetch``) and its
    authorize and end-session endpoints (navigated to); nothing else of the issuer, and nothing of anyone else.

    >>> page_policy({"token_endpoint": "https://auth.example/oauth2/token"}).split("; ")[3]
    "connect-src 'self' https://auth.example"
    """
    connect = _origins([(sign_in or {}).get("token_endpoint")])
    navigate = _origins([(sign_in or {}).get(k) for k in ("authorization_endpoint", "end_session_endpoint")])
    return (
        f"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        f"connect-src 'self'{connect}; img-src 'self' data:; form-action 'self'{navigate}"
    )


def _origins(urls: Iterable[str | None]) -> str:
    from urllib.parse import urlsplit

    found = []
    for url in urls:
        parts = urlsplit(url or "")
        origin = f"{parts.scheme}://{parts.netloc}"
        if parts.scheme in ("https", "http") and parts.netloc and origin not in found:
            found.append(origin)
    return "".join(" " + o for o in found)


def serve(app: Any, call: Any) -> None:
    """``GET /``: the chat page, told the model (when anyone may call), the auth mode and how to sign in."""
    # With keys or sign-in, the page learns the model from /v1/models once it may call, never from here.
    model = "" if app.config.auth_mode in ("api_key", "jwt") else app.config.model_id
    page = (
        resources.files("sagestream")
        .joinpath("static/index.html")
        .read_text("utf-8")
        .replace("__SAGESTREAM_MODEL__", html.escape(model))
        .replace("__SAGESTREAM_AUTH_MODE__", html.escape(app.config.auth_mode))
    )
    headers = PAGE_HEADERS
    if app.auth.verifier is not None:
        sign_in = app.auth.verifier.page_sign_in(app.config.jwt_page_client_id)
        page = page.replace("__SAGESTREAM_SIGN_IN__", html.escape(json.dumps(sign_in or {})))
        headers = {**PAGE_HEADERS, "content-security-policy": page_policy(sign_in)}
    call.writer.write(page.encode(), 200, headers)
