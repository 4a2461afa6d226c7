"""The :class:`Setting` type: one environment variable, how its text is read and checked; and the rules the
declarations share (:mod:`sagestream.settings` assembles them).

Example::

    >>> Setting("N", "whole", "a count", default=3, minimum=1).parse(" 2 ")
    2
    >>> positive(0)
    'must be more than 0'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from sagestream.protocols._wire import MIN_PAD_BYTES


class ConfigError(ValueError):
    """A setting that is missing or not valid; the function refuses to start with it."""

    __module__ = "sagestream.settings"  # where it is imported from, and named in a refusal to start


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
AUTH_MODES = ("iam", "api_key", "jwt", "none")

# How a variable's text becomes a value:
#   text    stripped; empty is unset (the default)
#   choice  one of ``choices``, case-insensitive
#   whole   a whole number of at least ``minimum``;  number: the same, fractions allowed
#   flag    true/false (1/0, yes/no, on/off); set but empty is false
#   list    comma-separated, blanks dropped (a tuple); names: the same as a set
#   words   separated by commas or spaces (a tuple)
Kind = Literal["text", "choice", "whole", "number", "flag", "list", "names", "words"]

READ_BY_CONFIG = "sagestream.config"


class Setting(NamedTuple):
    """One environment variable: how it is read, what it means, where it goes and where it comes from.

    A NamedTuple rather than a dataclass: its class costs init about 0.3 ms to make, a dataclass's 1.8 ms.
    """

    env: str
    kind: Kind
    meaning: str
    default: Any = None
    # The Config field it fills as parsed; None where code combines it with others (or another reader has it).
    field: str | None = None
    # The template.yaml parameter that sets it on AWS; None: the template does not, or not from a parameter.
    template_parameter: str | None = None
    minimum: int = 0
    choices: tuple[str, ...] = ()
    # A rule of this setting alone, beyond its kind: the problem with a parsed value, or None.
    check: Callable[[Any], str | None] | None = None
    # What the docs' table shows where the kind's own words would not say enough.
    default_doc: str | None = None
    value_doc: str | None = None
    # Who reads it: the function's configuration, or (declared for the docs and the template) another reader.
    read_by: str = READ_BY_CONFIG

    def parse(self, raw: str | None) -> Any:
        """The value of this setting when its variable holds ``raw`` (None: not set); :class:`ConfigError`
        naming the variable, the value and the rule it breaks."""
        if raw is None:
            return self.default
        if self.kind == "flag":
            word = raw.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ConfigError(f"{self.env}={raw!r} is not true or false")
        text = raw.strip()
        if self.kind in ("list", "names"):
            items = tuple(item.strip() for item in text.split(",") if item.strip())
            return frozenset(items) if self.kind == "names" else items
        if self.kind == "words":
            return tuple(text.replace(",", " ").split())
        if not text:
            return self.default
        value: Any
        if self.kind == "text":
            value = text
        elif self.kind == "choice":
            value = text.lower()
            if value not in self.choices:
                raise ConfigError(f"{self.env}={value!r}; expected one of {', '.join(self.choices)}")
        else:
            whole = self.kind == "whole"
            try:
                value = int(text) if whole else float(text)
            except ValueError:
                raise ConfigError(f"{self.env}={text!r} is not a {'whole ' if whole else ''}number") from None
            if value < self.minimum:
                raise ConfigError(f"{self.env}={text!r} must be at least {self.minimum}")
        problem = self.check(value) if self.check is not None else None
        if problem is not None:
            raise ConfigError(f"{self.env}={value!r} {problem}")
        return value


def pad_rule(pad: int) -> str | None:
    if 0 < pad < MIN_PAD_BYTES:
        return f"must be 0 or at least {MIN_PAD_BYTES} (an SSE comment: ':', padding, a blank line)"
    return None


def positive(seconds: float) -> str | None:
    # 0 would make the socket non-blocking, failing every call at once.
    return "must be more than 0" if seconds <= 0 else None


LOCAL = "`true` under `make run`"
