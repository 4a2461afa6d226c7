"""Who a request counts against (:func:`subject`): the identity the access check already learnt, as the name its
counters are kept under and the names ``QUOTAS``' ``callers`` may give it.

Environment variables read: none.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Subject", "subject"]


class Subject(NamedTuple):
    """Who a request counts against: ``key`` (what the counters are kept under), the names ``QUOTAS``'
    ``callers`` may give it, and the groups its sign-in says it is in."""

    key: str
    names: tuple[str, ...]
    groups: tuple[str, ...] = ()


def subject(
    auth_mode: str,
    *,
    issuer: str | None = None,
    sub: str | None = None,
    groups: tuple[str, ...] = (),
    key: tuple[str, str | None] | None = None,
    caller: str | None = None,
    source_ip: str | None = None,
) -> Subject:
    """Who a request counts against, from what the access check learnt: a token's ``issuer``, ``sub`` and
    ``groups``; the ``key`` the function checked (its SHA-256 in hex, and its name); the ``caller`` the front
    names (the IAM principal, or ``apikey:<id>`` of the key API Gateway checked); with ``AUTH_MODE=none`` the
    source address. An assumed role counts as its role, whatever its session's name: that name is the
    caller's to choose, and a fresh one would be a fresh quota. A federated user (``sts:GetFederationToken``)
    counts as its account's federated users together: its name is its minter's to choose, and the request
    names no minter (the Function URL's ``requestContext.authorizer.iam`` shows the federated user alone).

    >>> subject("api_key", key=("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "ci")).names
    ('key:ci', 'key:9f86d081884c7d65')
    >>> subject("iam", caller="arn:aws:sts::111122223333:assumed-role/app/any-session-name").key
    'iam:arn:aws:sts::111122223333:assumed-role/app'
    >>> subject("iam", caller="arn:aws:sts::111122223333:federated-user/any-name").key
    'iam:arn:aws:sts::111122223333:federated-user'
    """
    if sub is not None:
        return Subject(f"jwt:{issuer or ''}:{sub}", (f"jwt:{sub}",), groups)
    if key is not None:
        fingerprint = "key:" + key[0][:16]
        return Subject(fingerprint, ((f"key:{key[1]}",) if key[1] else ()) + (fingerprint,))
    if caller:
        if caller.startswith("apikey:"):
            return Subject(caller, (caller,))
        head, sep, _session = caller.rpartition("/")
        if sep and ":assumed-role/" in caller and head.count("/") == 1:
            principal = head  # the role, whatever the session's name
        elif sep and head.endswith(":federated-user") and head.startswith("arn:"):
            principal = head  # the account's federated users, whatever their names
        else:
            principal = caller
        return Subject(f"iam:{principal}", (f"iam:{principal}",))
    name = f"ip:{source_ip}" if auth_mode == "none" and source_ip else "anyone"
    return Subject(name, (name,))
