"""What ``QUOTAS`` says: the limits (:class:`Limits`), groups of them and callers' own (:class:`Policy`), read from
its words or its JSON (:func:`parse_policy`); which limits a caller gets (:meth:`Policy.limits_for`).

Environment variables read: none (``QUOTAS`` through :mod:`sagestream.config`).

Example::

    >>> parse_policy("tokens_per_minute=1000 requests_per_minute=10").default.tokens_per_minute
    1000
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

if TYPE_CHECKING:
    from sagestream.quotas._callers import Subject

__all__ = ["LIMIT_NAMES", "NO_LIMITS", "RESERVE_MAX_TOKENS", "Limits", "Policy", "parse_policy"]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Limit = NonNegative | None | msgspec.UnsetType
# The completion a request that sets no max_tokens reserves, where its model sets no MAX_TOKENS_LIMIT either.
RESERVE_MAX_TOKENS = 4096


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One set of limits; a field unset takes the default's, ``None`` is no limit."""

    requests_per_minute: Limit = msgspec.UNSET
    tokens_per_minute: Limit = msgspec.UNSET
    tokens_per_day: Limit = msgspec.UNSET
    tokens_per_month: Limit = msgspec.UNSET

    def over(self, base: Limits) -> Limits:
        """These limits, each unset one taken from ``base``."""
        pairs = zip(_values(self), _values(base), strict=True)
        return Limits(*(base_v if v is msgspec.UNSET else v for v, base_v in pairs))

    def get(self, name: str) -> int | None:
        value = getattr(self, name)
        return None if value is msgspec.UNSET else value

    @property
    def any(self) -> bool:
        return any(self.get(name) is not None for name in LIMIT_NAMES)


def _values(limits: Limits) -> tuple[Any, ...]:
    return tuple(getattr(limits, name) for name in LIMIT_NAMES)


LIMIT_NAMES: tuple[str, ...] = Limits.__struct_fields__
NO_LIMITS = Limits(None, None, None, None)


class Policy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``QUOTAS`` as JSON: the default limits, named groups of limits, and callers' own (a group's name or limits)."""

    default: Limits = Limits()
    groups: dict[str, Limits] = {}
    callers: dict[str, str | Limits] = {}
    # The completion reserved for a request with no max_tokens whose model has no MAX_TOKENS_LIMIT.
    reserve_max_tokens: Annotated[int, msgspec.Meta(ge=1)] = RESERVE_MAX_TOKENS

    def limits_for(self, subject: Subject) -> Limits:
        """The caller's own limits if it has some, else its first group's (in the policy's order), else the
        default; every field set (``None``: no limit)."""
        for name in subject.names:
            own = self.callers.get(name)
            if own is not None:
                return (self.groups[own] if isinstance(own, str) else own).over(self.default).over(NO_LIMITS)
        for group, limits in self.groups.items():
            if group in subject.groups:
                return limits.over(self.default).over(NO_LIMITS)
        return self.default.over(NO_LIMITS)


def parse_policy(text: str) -> Policy:
    """``QUOTAS``' value: JSON (a :class:`Policy`) or ``name=value`` words (the default limits);
    :class:`ValueError` naming what is wrong.

    >>> parse_policy("tokens_per_hour=5")
    Traceback (most recent call last):
    ...
    ValueError: 'tokens_per_hour' is not a limit; the limits are requests_per_minute, tokens_per_minute, \
tokens_per_day, tokens_per_month
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            policy = msgspec.json.decode(text, type=Policy)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None
        except msgspec.DecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        for caller, own in policy.callers.items():
            if isinstance(own, str) and own not in policy.groups:
                raise ValueError(f"caller {caller!r} is in group {own!r}, which 'groups' does not declare")
        return policy
    limits: dict[str, int | None] = {}
    for word in text.replace(",", " ").split():
        name, sep, value = word.partition("=")
        if name not in LIMIT_NAMES:
            raise ValueError(f"{name!r} is not a limit; the limits are {', '.join(LIMIT_NAMES)}")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"{word!r}: a limit is name=N, N a whole number")
        limits[name] = int(value)
    if not limits:
        raise ValueError("no limit is set")
    return Policy(default=Limits(**limits))
